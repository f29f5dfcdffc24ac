"""The chart's operator Deployment on the local cluster: it runs although the cluster directory is
under /tmp (where the chart mounts an emptyDir), and a killed operator's successor acts at once.

The session's local cluster lives in a temporary directory under /tmp. The brokers are the
stand-ins (``tests/k8s/stub_broker.py``, through the operator's ``HYBRIDMQ_BROKER_COMMAND``):
what is measured here is the operator.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "k8s"))

from operator_harness import Kube, broker_command, sample_cluster, teardown, wait_cluster_up, wait_for

from localcluster import LocalCluster

pytestmark = pytest.mark.cluster

CHART = Path(__file__).resolve().parents[2] / "helm" / "hybridmq"
CONFLICT_PAUSE = ("Possibly conflicting operators", "Pausing all operators", "Pausing operations")
# The successor's failover, counted from its first log line, on 2 shared cores ("within ~1-2 s",
# with room for load); a conflict pause alone lasts until the dead operator's record expires.
ACT_BOUND_S = 4.0


@pytest.fixture
def chart(local_cluster: LocalCluster, cluster_namespace: str) -> Iterator[tuple[Kube, str]]:
    assert str(local_cluster.directory).startswith("/tmp/"), local_cluster.directory
    release = f"hmq-{uuid.uuid4().hex[:5]}"
    extra_env = [{"name": "HYBRIDMQ_BROKER_COMMAND", "value": broker_command("stub")}]
    subprocess.run(
        [
            "helm",
            "install",
            release,
            str(CHART),
            "--namespace",
            cluster_namespace,
            "--set",
            f"operator.watchNamespaces={{{cluster_namespace}}}",
            "--set",
            "operator.logLevel=verbose",
            # One operator: what is measured is its own successor (a standby would take over instead).
            "--set",
            "operator.replicas=1",
            "--set",
            "tests.enabled=false",
            "--set-json",
            f"operator.extraEnv={json.dumps(extra_env)}",
        ],
        env=local_cluster.env(),
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    kube = Kube(local_cluster, cluster_namespace)
    try:
        yield kube, release
    finally:
        teardown(kube, None)
        subprocess.run(
            ["helm", "uninstall", release, "--namespace", cluster_namespace, "--wait=false"],
            env=local_cluster.env(),
            check=False,
            capture_output=True,
            timeout=60,
        )


def operator_pods(kube: Kube) -> list[Any]:
    pods = kube.core.list_namespaced_pod(
        kube.namespace, label_selector="app.kubernetes.io/component=operator"
    )
    return [p for p in pods.items if p.metadata.deletion_timestamp is None]


def ready_operator(kube: Kube) -> str | None:
    for pod in operator_pods(kube):
        conds = {c.type: c.status for c in (pod.status.conditions or [])}
        if conds.get("Ready") == "True":
            return str(pod.metadata.name)
    return None


def primary_of(kube: Kube, name: str) -> dict[str, Any]:
    return next(dict(p["status"]) for p in kube.by_type("fixed") if p["metadata"]["name"] == name)


def settled(kube: Kube) -> bool:
    parts = kube.by_type("fixed")
    return (
        len(kube.ready_pods("mm")) == 3
        and bool(parts)
        and all(
            (p.get("status") or {}).get("state") == "Active" and len(p["status"].get("inSync") or []) == 2
            for p in parts
        )
    )


def diagnosis(kube: Kube) -> str:
    """What a user would look at: Partition statuses, MM pods and their Leases."""
    lines = [f"{p['metadata']['name']}: {p.get('status')}" for p in kube.partitions()]
    lines += [f"pod {p.metadata.name} uid={p.metadata.uid} phase={p.status.phase}" for p in kube.pods("mm")]
    for lease in kube.coord.list_namespaced_lease(kube.namespace).items:
        owners = [o.uid for o in lease.metadata.owner_references or []]
        accounted = (lease.metadata.annotations or {}).get("hybridmq.io/accounted-incarnation")
        lines.append(
            f"lease {lease.metadata.name} owners={owners} acquired={lease.spec.acquire_time} "
            f"accounted={accounted}"
        )
    return "\n".join(lines)


def crash_and_fail_over(
    local_cluster: LocalCluster, kube: Kube, name: str, replace_pod: bool
) -> tuple[float, str]:
    """Kill -9 the operator (and with ``replace_pod`` its pod too, so the Deployment makes a new
    one), delete the primary MM of ``name`` meanwhile; returns how long after its successor's
    first log line the partition had a new primary, and that successor's log."""
    ns = kube.namespace
    # The operator pod has a readiness probe: after the previous crash it is Ready again only once
    # its startup handlers ran.
    old_pod = wait_for(lambda: ready_operator(kube), 120, "a Ready operator pod")
    old_pid = local_cluster.container_pid(ns, old_pod, "operator")
    log = local_cluster.container_log(ns, old_pod, "operator")
    assert old_pid is not None and log is not None
    before = primary_of(kube, name)
    local_cluster.kill_container(ns, old_pod, "operator", sig=signal.SIGKILL)
    wait_for(lambda: not psutil.pid_exists(old_pid), 30, "the operator process gone", interval=0.01)
    offset = log.stat().st_size  # the successor's lines (in the same pod) come after this
    if replace_pod:
        local_cluster.kubectl("delete", "pod", old_pod, "-n", ns, "--grace-period=0", "--force")
    kube.core.delete_namespaced_pod(before["primary"], ns)

    def successor() -> tuple[str, int] | None:
        for pod in operator_pods(kube):
            pid = local_cluster.container_pid(ns, pod.metadata.name, "operator")
            if pid is not None and pid != old_pid and (pod.metadata.name != old_pod or not replace_pod):
                return str(pod.metadata.name), pid
        return None

    new_pod, _pid = wait_for(successor, 90, "the operator's successor process", interval=0.02)

    def moved() -> bool:
        now = primary_of(kube, name)
        return now.get("primary") not in (None, before["primary"]) and now["epoch"] > before["epoch"]

    def successor_log() -> str:
        path = local_cluster.container_log(ns, new_pod, "operator")
        data = path.read_bytes() if path is not None else b""
        return data[offset if new_pod == old_pod else 0 :].decode(errors="replace")

    # From its first log line: Python's imports on a loaded machine are not what this measures.
    wait_for(lambda: successor_log().strip(), 60, "the successor's first log line", interval=0.02)
    started = time.monotonic()
    try:
        wait_for(moved, 60, f"{name} failed over by the successor", interval=0.05)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{diagnosis(kube)}\n{successor_log()[-4000:]}") from None
    return time.monotonic() - started, successor_log()


def test_chart_operator_survives_crashes_without_a_peering_pause(
    local_cluster: LocalCluster, cluster_namespace: str, chart: tuple[Kube, str]
) -> None:
    kube, _release = chart
    # The operator pod runs although its /tmp emptyDir covers the cluster directory.
    wait_for(lambda: ready_operator(kube), 120, "the chart's operator pod Ready")
    kube.create(sample_cluster("ch", cluster_namespace, mms=3, cms=1, fixed=2))
    wait_cluster_up(kube, "ch", 3, 1)
    figures = {}
    for replace_pod, name in ((False, "ch-fixed-0"), (True, "ch-fixed-1")):
        wait_for(lambda: settled(kube), 120, "cluster settled")
        took, log = crash_and_fail_over(local_cluster, kube, name, replace_pod)
        case = "new pod" if replace_pod else "same pod"
        figures[case] = round(took, 2)
        paused = [line for line in log.splitlines() if any(p in line for p in CONFLICT_PAUSE)]
        assert not paused, f"{case}: the successor paused:\n" + "\n".join(paused)
        assert took < ACT_BOUND_S, f"{case}: the successor took {took:.2f}s\n{log[-3000:]}"
    print(f"\noperator killed -> failover by its successor, from its first log line: {figures}")
