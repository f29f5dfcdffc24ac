"""Operator HA through Kopf peering: two operators, one works; killed, the other takes over."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from operator_harness import (
    Kube,
    OperatorProcess,
    sample_cluster,
    teardown,
    wait_cluster_up,
    wait_for,
)

from hybridmq_operator.peering import PEERING_CRDS, peering_object
from localcluster import LocalCluster

pytestmark = pytest.mark.cluster


@pytest.fixture
def peered(
    local_cluster: LocalCluster, cluster_namespace: str, kube: Kube
) -> Iterator[tuple[OperatorProcess, OperatorProcess]]:
    local_cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(PEERING_CRDS))
    for crd in PEERING_CRDS:
        local_cluster.kubectl("wait", "--for=condition=Established", f"crd/{crd['metadata']['name']}")
    local_cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(peering_object(cluster_namespace)))
    env = {"HYBRIDMQ_OPERATOR_PEERING": "hybridmq", "HYBRIDMQ_OPERATOR_PEERING_LIFETIME": "4"}
    first = OperatorProcess(
        local_cluster, cluster_namespace, extra_env={**env, "HYBRIDMQ_OPERATOR_PRIORITY": "100"}
    )
    second = OperatorProcess(
        local_cluster, cluster_namespace, extra_env={**env, "HYBRIDMQ_OPERATOR_PRIORITY": "50"}
    )
    first.log = local_cluster.directory / f"operator-{cluster_namespace}-a.log"
    second.log = local_cluster.directory / f"operator-{cluster_namespace}-b.log"
    for proc in (first, second):
        proc.standalone = False
    try:
        first.start()
        wait_for(lambda: "Resuming operations" in first.log_text(), 60, "first operator active")
        second.start()
        wait_for(lambda: "Initial authentication has finished" in second.log_text(), 60, "second operator up")
        time.sleep(1.5)  # it sees the first one's peering record and stays paused
        yield first, second
    finally:
        first.stop()
        teardown(kube, second)


def test_standby_operator_takes_over(
    cluster_namespace: str, kube: Kube, peered: tuple[OperatorProcess, OperatorProcess]
) -> None:
    first, second = peered
    kube.create(sample_cluster("ha", cluster_namespace, mms=2, cms=1, fixed=2))
    wait_cluster_up(kube, "ha", 2, 1)
    # The standby (lower priority) stays paused: it has handled nothing.
    time.sleep(2.0)
    assert "reconcile_children" in first.log_text()
    assert "reconcile_children" not in second.log_text()
    first.kill()
    p = kube.by_type("fixed")[0]
    victim, epoch = p["status"]["primary"], p["status"]["epoch"]
    time.sleep(0.5)
    kube.core.delete_namespaced_pod(victim, cluster_namespace)

    def moved() -> bool:
        st = next(q for q in kube.by_type("fixed") if q["metadata"]["name"] == p["metadata"]["name"])[
            "status"
        ]
        return bool(st["primary"] not in (victim, None) and st["epoch"] == epoch + 1)

    wait_for(moved, 60, "failover by the standby operator")
    assert "Resuming operations" in second.log_text()
    wait_cluster_up(kube, "ha", 2, 1)


OTHER_PODS = 200


def pending_broker_pod(name: str) -> dict[str, Any]:
    """A pod the operator's pod index selects (broker labels of a cluster "other") that never runs."""
    labels = {"app.kubernetes.io/managed-by": "hybridmq-operator", "hybridmq.io/cluster": "other"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels, "annotations": {"padding": "x" * 2000}},
        "spec": {
            "nodeSelector": {"hybridmq.io/no-such-node": "true"},
            "containers": [{"name": "c", "image": "none", "command": ["true"]}],
        },
    }


def test_standby_taking_over_fails_nothing_over(
    local_cluster: LocalCluster, cluster_namespace: str, peered: tuple[OperatorProcess, OperatorProcess]
) -> None:
    """A standby that takes over from a dead operator (its node lost, say) must not take the MMs it
    has not seen yet for lost: the cluster's pods were created while it was paused, so its view of
    them comes from the listing it makes on resuming. No MM is lost here, so no partition may move:
    every primary and epoch stays, and no failover or offline partition is announced."""
    first, second = peered
    kube = Kube(local_cluster, cluster_namespace)
    # Pods of another cluster (Pending: no node matches), as in a busy namespace: listing the
    # broker pods after the pause takes the standby a while, while its daemon starts at once.
    for i in range(OTHER_PODS):
        kube.core.create_namespaced_pod(cluster_namespace, pending_broker_pod(f"other-{i:03d}"))
    kube.create(sample_cluster("tk", cluster_namespace, mms=3, cms=1, fixed=3))
    wait_cluster_up(kube, "tk", 3, 1)

    def placed() -> dict[str, tuple[str, int]] | None:
        parts = kube.partitions()
        st = {p["metadata"]["name"]: p.get("status") or {} for p in parts}
        ok = len(st) >= 3 and all(s.get("primary") and s.get("state") == "Active" for s in st.values())
        return {n: (s["primary"], int(s.get("epoch") or 0)) for n, s in st.items()} if ok else None

    def steady() -> dict[str, tuple[str, int]] | None:
        now = placed()
        time.sleep(2.0)  # settled: nothing moves for a while under the first operator
        return now if now is not None and placed() == now else None

    before = wait_for(steady, 90, "every partition Active with a primary, nothing moving")
    first.kill()
    wait_for(lambda: "Resuming operations" in second.log_text(), 60, "the standby resumed")
    # The standby plans several rounds (every 250 ms) once it has resumed.
    time.sleep(5.0)
    assert placed() == before, second.log_text()[-3000:]
    reasons = kube.event_reasons()
    assert not {"FailedOver", "PartitionOffline", "PartitionsOffline"} & reasons, reasons
