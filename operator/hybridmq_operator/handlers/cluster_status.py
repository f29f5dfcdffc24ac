"""The BrokerCluster status: observedGeneration, conditions, ready counts, broker table, counts.

Pure: ``cluster_status`` builds the status dict; the daemon writes it only when it changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from hybridmq.api.resources import PartitionState, PartitionType
from hybridmq.planner import ClusterState
from hybridmq_operator import conditions
from hybridmq_operator.conditions import ClusterObservation


def partition_counts(state: ClusterState) -> dict[str, int]:
    counts = {"total": 0, "fixed": 0, "onDemand": 0, "active": 0, "pending": 0, "migrating": 0, "draining": 0}
    for info in state.partitions:
        if info.deleting:
            continue
        counts["total"] += 1
        counts["fixed" if info.spec.type == PartitionType.FIXED else "onDemand"] += 1
        st = info.status.state if info.status else PartitionState.PENDING
        key = {
            PartitionState.ACTIVE: "active",
            PartitionState.PENDING: "pending",
            PartitionState.MIGRATING: "migrating",
            PartitionState.DRAINING: "draining",
            PartitionState.DRAINED: "draining",
        }[st]
        counts[key] += 1
    return counts


def cluster_status(
    obs: ClusterObservation,
    state: ClusterState,
    brokers: list[dict[str, Any]],
    previous: Mapping[str, Any],
    generation: int,
    now: datetime,
    on_demand_expected: bool,
) -> dict[str, Any]:
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    conds = conditions.merge_conditions(
        previous.get("conditions"), conditions.cluster_conditions(obs, on_demand_expected), stamp, generation
    )
    return {
        "observedGeneration": generation,
        "conditions": conds,
        "readyConnectionManagers": obs.cm_ready,
        "readyMessageManagers": obs.mm_ready,
        "brokers": brokers,
        "partitions": partition_counts(state),
    }


def _comparable(status: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in status.items() if k != "conditions"}
    out["conditions"] = [
        {k: v for k, v in c.items() if k != "lastTransitionTime"} for c in status.get("conditions") or []
    ]
    return out


def changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    keys = set(new)
    return _comparable({k: old.get(k) for k in keys}) != _comparable(new)
