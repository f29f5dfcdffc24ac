"""Operator HA through Kopf peering: two operators, one works; killed, the other takes over."""

from __future__ import annotations

import time
from collections.abc import Iterator

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
