"""The BrokerCluster status and Warning events, written at the end of each reconcile round.

The status is built by the pure ``cluster_status`` from the state the round planned on and written
only when it changed; a Warning event is posted when a cause (a blocked scale-down, a stuck broker
pod) appears or its message changes.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any, cast

import kopf

from hybridmq.api.resources import PartitionState, PartitionType
from hybridmq.planner import ClusterState, ScaleDownBlock, domain_spread
from hybridmq.planner.roll import RollDecision
from hybridmq_operator import failover_history, kube, metrics, names, observe, problems
from hybridmq_operator.apply import object_ref
from hybridmq_operator.conditions import rolling
from hybridmq_operator.handlers import children, cluster_status
from hybridmq_operator.settings import ClusterSettings


def cluster_ref(body: Mapping[str, Any]) -> dict[str, Any]:
    """The BrokerCluster as the object of an Event."""
    return object_ref(body, names.CLUSTER_KIND)


def set_partition_gauge(cluster: str, state: ClusterState) -> None:
    counts = Counter(
        (info.spec.type.value, (info.status.state if info.status else PartitionState.PENDING).value)
        for info in state.partitions
        if not info.deleting
    )
    for ptype in PartitionType:
        for pstate in PartitionState:
            metrics.PARTITIONS.labels(cluster, ptype.value, pstate.value).set(
                counts[(ptype.value, pstate.value)]
            )


def roll_progress(roll: RollDecision) -> dict[str, Any]:
    """``status.roll``: the pod the roll is at and how many pods run the current revision."""
    mm, cm = roll.updated.get("mm", (0, 0)), roll.updated.get("cm", (0, 0))
    return {
        "pod": roll.pod,
        "messageManagersUpdated": mm[0],
        "messageManagers": mm[1],
        "connectionManagersUpdated": cm[0],
        "connectionManagers": cm[1],
    }


class StatusWriter:
    """What one BrokerCluster's status writes remember between rounds (rebuildable)."""

    def __init__(self, name: str, namespace: str) -> None:
        self.name = name
        self.namespace = namespace
        self.last_status: dict[str, Any] | None = None  # None: compare with the body's status
        # Event reason -> message last posted on the BrokerCluster (post again only on a change).
        self.announced: dict[str, str] = {}

    def announce(self, body: Mapping[str, Any], reason: str, message: str | None) -> None:
        """A Warning Event on the BrokerCluster when ``message`` is new; None: the cause is gone."""
        if message is None:
            self.announced.pop(reason, None)
            return
        if self.announced.get(reason) != message:
            self.announced[reason] = message
            kopf.event(
                kopf.Body(cast(kopf.RawBody, cluster_ref(body))),
                type="Warning",
                reason=reason,
                message=message[:1000],
            )

    async def write(
        self,
        body: Mapping[str, Any],
        snapshot: observe.Snapshot,
        state: ClusterState,
        settings: ClusterSettings,
        block: ScaleDownBlock | None,
        now: datetime,
        failovers: list[dict[str, Any]] | None = None,
        roll: RollDecision | None = None,
    ) -> None:
        """The status from the state this round planned on; patched only when it changed.
        ``failovers``: the failover history (None: keep what the status has); ``roll``: this
        round's roll decision (None: keep what the status says about the roll)."""
        previous = self.last_status if self.last_status is not None else dict(body.get("status") or {})
        obs = observe.cluster_observation(state, snapshot, settings.cm_replicas, settings.mm_replicas)
        obs = replace(
            obs,
            pod_problems=problems.pod_problems(snapshot.pods),
            oversize_reports=problems.oversize_reports(snapshot.leases),
            children_error=children.failures.get((self.namespace, self.name)),
            scale_down_blocked=block.message if block is not None else None,
            domain_spread=domain_spread(state),
            rolling=rolling.from_decision(roll, previous.get("conditions")),
        )
        self.announce(body, "ScaleDownBlocked", obs.scale_down_blocked)
        stuck = obs.pod_problems[0] if obs.pod_problems else None
        self.announce(body, "BrokerPodStuck", f"{stuck[0]}: {stuck[1]}: {stuck[2]}" if stuck else None)
        metrics.LOST_MMS.labels(self.name).set(len(obs.lost_mms))
        set_partition_gauge(self.name, state)
        status = cluster_status.cluster_status(
            obs,
            state,
            observe.broker_table(snapshot),
            previous,
            settings.generation,
            now,
            on_demand_expected=settings.on_demand_per_mm > 0,
        )
        history = failovers if failovers is not None else previous.get("failovers")
        if history:
            status["failovers"] = history
            last = failover_history.last_duration(history)
            if last is not None:
                status["lastFailoverSeconds"] = last
        progress = roll_progress(roll) if roll is not None else previous.get("roll")
        if progress:
            status["roll"] = progress
        if cluster_status.changed(previous, status):
            await asyncio.to_thread(
                kube.merge_patch,
                names.API_VERSION,
                names.CLUSTER_KIND,
                self.namespace,
                self.name,
                {"status": status},
                "status",
            )
            self.last_status = status
