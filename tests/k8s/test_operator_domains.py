"""Failure domains on the local cluster: a second node agent (a second node), the two nodes in two
zones of the BrokerCluster's ``topologyKey``, four MMs over them. What a user checks: every fixed
partition has a replica in each zone (read from the pods' nodes and the nodes' labels, not from
the operator), and the BrokerCluster's ``ReplicasSpreadAcrossDomains`` condition says so. The two
nodes start in one zone (the condition says there are not enough domains), so that the partitions
placed then are moved apart once the second node turns out to be another zone.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from operator_harness import (
    REPO,
    Kube,
    OperatorProcess,
    sample_cluster,
    wait_cluster_up,
    wait_for,
)

from localcluster.agent.ipam import pick_pod_cidr
from localcluster.controlplane import LocalCluster
from localcluster.processes import MARKER_ENV, spawn, stop_group

pytestmark = pytest.mark.cluster

NAME = "dom"
MMS, FIXED = 4, 4


@pytest.fixture
def zone_key(local_cluster: LocalCluster) -> str:
    # A label key of this run only: nothing else on the shared cluster reads it.
    return f"zone.test.hybridmq.io/{int(time.time() * 1000) % 10**9}"


@pytest.fixture
def second_node(local_cluster: LocalCluster, zone_key: str) -> Iterator[str]:
    """A second node agent (as the admin: the Node authorizer knows only local-node's identity)."""
    name = f"zone-b-{int(time.time()) % 100000}"
    directory = local_cluster.directory / name
    env = local_cluster.env()
    env[MARKER_ENV] = local_cluster.marker
    env["PYTHONPATH"] = str(REPO / "hack")
    _, record = spawn(
        name,
        [
            sys.executable,
            "-m",
            "localcluster.agent",
            f"--dir={directory}",
            f"--kubeconfig={local_cluster.kubeconfig}",
            f"--node-name={name}",
            f"--api-port={local_cluster.api_port}",
            f"--pod-cidr={pick_pod_cidr()}",
        ],
        Path(directory) / "agent.log",
        env,
    )
    core: Any = client.CoreV1Api(local_cluster.api_client())
    try:

        def ready() -> bool:
            try:
                node = core.read_node(name)
            except Exception:
                return False
            return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])

        wait_for(ready, 60, f"node {name} Ready")
        core.patch_node(local_cluster.node_name, {"metadata": {"labels": {zone_key: "a"}}})
        core.patch_node(name, {"metadata": {"labels": {zone_key: "a"}}})  # one zone to start
        yield name
    finally:
        stop_group(record, grace=15.0)
        core.patch_node(local_cluster.node_name, {"metadata": {"labels": {zone_key: None}}})
        with contextlib.suppress(ApiException):  # never registered
            core.delete_node(name)  # its pods go with it (the namespace is deleted too)


def nodes_of_mms(kube: Kube) -> dict[str, str]:
    """MM pod -> the node it runs on, the way a user reads it (kubectl get pod -o wide)."""
    core: Any = kube.core
    pods = core.list_namespaced_pod(kube.namespace, label_selector="app.kubernetes.io/component=mm").items
    return {str(p.metadata.name): str(p.spec.node_name) for p in pods}


def fixed_replicas(kube: Kube) -> dict[str, list[str]]:
    return {
        p["metadata"]["name"]: list((p.get("status") or {}).get("replicas") or [])
        for p in kube.partitions()
        if p["spec"]["type"] == "fixed"
    }


def spread_condition(kube: Kube) -> dict[str, Any]:
    conds = (kube.cluster(NAME).get("status") or {}).get("conditions") or []
    return next((c for c in conds if c["type"] == "ReplicasSpreadAcrossDomains"), {})


def test_fixed_partitions_are_moved_apart_once_there_are_two_zones_and_the_status_says_so(
    kube: Kube, operator: OperatorProcess, second_node: str, zone_key: str
) -> None:
    body = sample_cluster(NAME, kube.namespace, mms=MMS, cms=1, fixed=FIXED)
    body["spec"]["messageManagers"]["topologyKey"] = zone_key
    kube.create(body)
    wait_cluster_up(kube, NAME, MMS, 1, timeout=180)
    nodes = nodes_of_mms(kube)
    # The scheduler spreads MM pods over the two nodes (preferred anti-affinity on the key, whose
    # value is the same on both for now, so over hostnames in practice): both run some.
    assert len(set(nodes.values())) == 2, nodes

    # One zone: the replicas share it (on different MMs), and the status says why.
    def short() -> dict[str, Any] | None:
        cond = spread_condition(kube)
        return cond if cond.get("reason") == "NotEnoughDomains" else None

    cond = wait_for(short, 60, "ReplicasSpreadAcrossDomains=False (NotEnoughDomains)")
    assert cond["status"] == "False" and "only 1 failure domains" in cond["message"], cond
    # Two replicas each, on different MMs, once the planner has placed every second copy (a
    # partition turns Active with its primary; its backup may come a round later).
    wait_for(
        lambda: all(len(set(r)) == 2 for r in fixed_replicas(kube).values()) or None,
        60,
        "two replicas on different MMs for every fixed partition",
    )
    together = [n for n, r in fixed_replicas(kube).items() if len({nodes[m] for m in r}) == 1]
    assert together, f"no fixed partition with both replicas on one node: {fixed_replicas(kube)} {nodes}"

    # The second node turns out to be another zone: within a minute or so (the operator reads node
    # labels again every 60 s) every fixed partition has a replica in each zone.
    kube.core.patch_node(second_node, {"metadata": {"labels": {zone_key: "b"}}})
    zone = {mm: ("b" if node == second_node else "a") for mm, node in nodes.items()}

    def spread() -> dict[str, list[str]] | None:
        placed = fixed_replicas(kube)
        ok = len(placed) == FIXED and all(
            len(r) == 2 and {zone[m] for m in r} == {"a", "b"} for r in placed.values()
        )
        return placed if ok else None

    wait_for(spread, 180, f"every fixed partition with a replica in each zone (were together: {together})")
    cond = wait_for(
        lambda: spread_condition(kube).get("status") == "True" and spread_condition(kube), 60, "Spread"
    )
    assert cond["reason"] == "Spread" and zone_key in cond["message"], cond
    assert nodes_of_mms(kube) == nodes  # nothing was rescheduled: the replicas moved, not the pods
