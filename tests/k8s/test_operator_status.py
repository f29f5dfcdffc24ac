"""What a user reads from the operator on the local cluster: conditions, events and metrics that
tell the truth, and a scale-down that would take partitions below minInSync refused.

One namespace, one operator and one BrokerCluster (stand-in brokers) for the module; the tests run
in order. The checks read the API and /metrics the way a user does (kubectl, Prometheus).
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from operator_harness import (
    GROUP,
    VERSION,
    Kube,
    OperatorProcess,
    module_fixtures,
    sample_cluster,
    wait_cluster_up,
    wait_for,
)

pytestmark = pytest.mark.cluster

NAME = "st"
MMS, CMS, FIXED = 3, 1, 3


namespace, kube, operator, cluster = module_fixtures("opstatus", NAME, MMS, CMS, FIXED)


def conditions(kube: Kube, name: str) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (kube.cluster(name).get("status") or {}).get("conditions") or []}


def cluster_events(kube: Kube, name: str) -> list[Any]:
    return [e for e in kube.events("BrokerCluster") if e.involved_object.name == name]


def metric(text: str, name: str, **labels: str) -> float:
    """One sample of the Prometheus text format (0 when absent)."""
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', line[len(name) : line.index("}") + 1]))
        if all(found.get(k) == v for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def placement(kube: Kube) -> dict[str, tuple[Any, ...]]:
    return {
        p["metadata"]["name"]: (
            (p.get("status") or {}).get("primary"),
            tuple((p.get("status") or {}).get("replicas") or ()),
        )
        for p in kube.partitions()
        if p["spec"].get("cluster") == NAME
    }


def states(kube: Kube) -> dict[str, str]:
    return {
        p["metadata"]["name"]: (p.get("status") or {}).get("state", "Pending")
        for p in kube.partitions()
        if p["spec"].get("cluster") == NAME
    }


def test_status_and_partitions_gauge_on_a_healthy_cluster(
    kube: Kube, cluster: str, operator: OperatorProcess
) -> None:
    wait_for(lambda: conditions(kube, cluster).get("Ready", {}).get("status") == "True", 60, "Ready")
    # Right after start-up a backup may still be catching up (Degraded=True, ReducedRedundancy):
    # a healthy cluster settles at Degraded=False.
    wait_for(
        lambda: conditions(kube, cluster).get("Degraded", {}).get("status") == "False", 60, "Degraded=False"
    )
    conds = conditions(kube, cluster)
    assert conds["Degraded"]["status"] == "False" and "ScaleDownBlocked" not in conds
    by_type: dict[tuple[str, str], int] = {}
    for p in kube.partitions():
        key = (p["spec"]["type"], (p.get("status") or {}).get("state", "Pending"))
        by_type[key] = by_type.get(key, 0) + 1

    def gauge_matches() -> bool:
        text = operator.http_get(operator.metrics_port, "/metrics")
        return all(
            metric(text, "hybridmq_operator_partitions", cluster=cluster, type=t, state=s) == n
            for (t, s), n in by_type.items()
        )

    wait_for(gauge_matches, 30, f"partitions gauge {by_type}")


def test_failovers_are_counted_once_and_announced_on_the_cluster(
    kube: Kube, cluster: str, operator: OperatorProcess
) -> None:
    before_text = operator.http_get(operator.metrics_port, "/metrics")
    counted_before = metric(before_text, "hybridmq_operator_failovers_total", cluster=cluster)
    observed_before = metric(
        before_text, "hybridmq_operator_failover_duration_seconds_count", cluster=cluster
    )
    parts = {p["metadata"]["name"]: p.get("status") or {} for p in kube.partitions()}
    victim = parts[f"{cluster}-fixed-0"]["primary"]
    led = {n for n, st in parts.items() if st.get("primary") == victim}
    assert led

    kube.core.delete_namespaced_pod(victim, kube.namespace)

    def moved() -> bool:
        now = {p["metadata"]["name"]: (p.get("status") or {}) for p in kube.partitions()}
        return all(n not in now or now[n].get("primary") not in (victim, None) for n in led)

    wait_for(moved, 30, f"partitions led by {victim} failed over")
    # Let the cluster heal: the pod returns, replacement backups are placed and reported in sync;
    # every one of those status writes used to count as one more failover.
    wait_cluster_up(kube, cluster, MMS, CMS, timeout=120)
    time.sleep(5)
    text = operator.http_get(operator.metrics_port, "/metrics")
    counted = metric(text, "hybridmq_operator_failovers_total", cluster=cluster) - counted_before
    observed = (
        metric(text, "hybridmq_operator_failover_duration_seconds_count", cluster=cluster) - observed_before
    )
    assert counted == len(led), f"{counted} failovers counted for {len(led)} partitions that failed over"
    assert observed == len(led)
    events = [e for e in cluster_events(kube, cluster) if e.reason == "FailedOver"]
    assert events and victim in events[-1].message and "failed over" in events[-1].message


def test_scale_down_below_min_in_sync_is_refused(kube: Kube, cluster: str, operator: OperatorProcess) -> None:
    # The API server refuses fewer MMs than the copies a write needs.
    with pytest.raises(ApiException) as refused:
        kube.patch_cluster(cluster, {"spec": {"messageManagers": {"replicas": 1}}})
    assert refused.value.status == 422
    assert "minInSync must be <= messageManagers.replicas" in json.loads(refused.value.body)["message"]

    # Lowering the cluster's minInSync with it passes the API, but the existing partitions keep
    # minInSync 2: the operator refuses to evacuate and says so, and nothing moves.
    wait_cluster_up(kube, cluster, MMS, CMS, timeout=120)
    generation = kube.apps.read_namespaced_stateful_set(f"{cluster}-mm", kube.namespace).metadata.generation
    kube.patch_cluster(
        cluster, {"spec": {"messageManagers": {"replicas": 1}, "partitions": {"fixed": {"minInSync": 1}}}}
    )

    def blocked() -> dict[str, Any] | None:
        return conditions(kube, cluster).get("ScaleDownBlocked")

    cond = wait_for(blocked, 60, "ScaleDownBlocked condition")
    assert cond["status"] == "True" and cond["reason"] == "BelowMinInSync"
    assert (
        "need 2 in-sync copies" in cond["message"] and "only 1 message managers would stay" in cond["message"]
    )
    wait_for(lambda: any(e.reason == "ScaleDownBlocked" for e in cluster_events(kube, cluster)), 30, "event")

    # The config change rolls the pods (all three: the scale-down is refused); once they are back
    # nothing is evacuated. Back means the operator's roll is over (`Rolling` Done): three Ready
    # MMs are also seen between two restarts, and a roll still going on made the next tests see
    # its failovers.
    def rolled_out() -> bool:
        sts = kube.apps.read_namespaced_stateful_set(f"{cluster}-mm", kube.namespace)
        st = sts.status
        return bool(
            sts.metadata.generation > generation
            and st.observed_generation == sts.metadata.generation
            and st.updated_replicas == st.ready_replicas == MMS
            and conditions(kube, cluster).get("Rolling", {}).get("reason") == "Done"
        )

    wait_for(rolled_out, 180, "the MMs' roll finished")
    wait_for(lambda: len(kube.ready_pods("mm")) == MMS or None, 120, "MMs back")
    wait_for(
        lambda: conditions(kube, cluster)["Degraded"]["status"] == "False",
        60,
        "full redundancy after the roll",
    )
    time.sleep(5)
    assert kube.sts_replicas(f"{cluster}-mm") == MMS
    # Serving partitions keep both copies (the roll drains on-demand partitions of each restarted
    # MM: a Draining one keeps the copy it has until it is collected, by design).
    serving = {n for n, p in states(kube).items() if p not in ("Draining", "Drained")}
    kept = {n: r for n, r in placement(kube).items() if n in serving}
    assert kept and {len(replicas) for _, replicas in kept.values()} == {2}, placement(kube)
    assert conditions(kube, cluster)["ScaleDownBlocked"]["status"] == "True"

    # Back to 3 MMs: the refusal is gone.
    kube.patch_cluster(cluster, {"spec": {"messageManagers": {"replicas": MMS}}})
    wait_for(lambda: blocked() is None, 60, "ScaleDownBlocked cleared")


def test_partition_of_a_missing_cluster_says_so(kube: Kube, operator: OperatorProcess, cluster: str) -> None:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Partition",
        "metadata": {"name": "lost-fixed-0"},
        "spec": {"cluster": "no-such-cluster", "type": "fixed"},
    }
    kube.create(body)

    def ready() -> dict[str, Any] | None:
        p = kube.custom.get_namespaced_custom_object(
            GROUP, VERSION, kube.namespace, "partitions", "lost-fixed-0"
        )
        conds = {c["type"]: c for c in (p.get("status") or {}).get("conditions") or []}
        return conds.get("Ready")

    cond = wait_for(ready, 30, "a status on the orphan Partition")
    assert cond["status"] == "False" and cond["reason"] == "ClusterNotFound"
    assert "no-such-cluster" in cond["message"]
    kube.custom.delete_namespaced_custom_object(GROUP, VERSION, kube.namespace, "partitions", "lost-fixed-0")


def test_unpullable_image_is_named_in_ready_and_announced(
    kube: Kube, operator: OperatorProcess, cluster: str
) -> None:
    bad = sample_cluster("badimg", kube.namespace, mms=2, cms=0, fixed=1)
    bad["spec"]["image"] = "registry.invalid/nobody/nothing:1"
    kube.create(bad)

    def ready_reason() -> str | None:
        cond = conditions(kube, "badimg").get("Ready") or {}
        return cond.get("message") if cond.get("reason") == "ErrImagePull" else None

    message = wait_for(ready_reason, 90, "Ready names ErrImagePull")
    assert "badimg-mm-" in message and "registry.invalid/nobody/nothing:1" in message
    wait_for(
        lambda: any(e.reason == "BrokerPodStuck" for e in cluster_events(kube, "badimg")),
        30,
        "BrokerPodStuck event",
    )
    kube.custom.delete_namespaced_custom_object(GROUP, VERSION, kube.namespace, "brokerclusters", "badimg")


def test_default_logging_is_quiet_when_nothing_happens(operator: OperatorProcess, cluster: str) -> None:
    wait_for(
        lambda: (
            conditions(Kube(operator.cluster, operator.namespace), cluster).get("Ready", {}).get("status")
            == "True"
        ),
        60,
        "Ready",
    )
    time.sleep(3)
    start = len(operator.log_text().splitlines())
    time.sleep(10)
    lines = operator.log_text().splitlines()[start:]
    # Idle: no reconcile round has anything to report (a status write that re-counted an old
    # failover used to log a round every 5 s); at most Kopf's once-a-minute resync line.
    assert not [line for line in lines if "round:" in line], "\n".join(lines[-20:])
    assert len(lines) <= 2, "\n".join(lines[-20:])
    # Nor does the operator log a line per Partition watch event, even while busy (the failover
    # and the scale-down above wrote many Partition statuses).
    assert "Handler 'partition_without_cluster'" not in operator.log_text()
