"""MM scale-down, within the reconcile round: refused while it would leave a partition short of its
own minInSync (``ScaleDownBlocked``), finished once the planner has evacuated the leaving MMs.

Until then the MM StatefulSet keeps its size: the planner moves the replicas off the MMs whose
ordinal is at or above the desired count, and lists them in ``safe_to_remove`` once they hold none.
"""

from __future__ import annotations

import asyncio
from typing import Any

from hybridmq.planner import ClusterState, Plan, ScaleDownBlock, blocked_scale_down
from hybridmq_operator import kube, names, observe
from hybridmq_operator.settings import ClusterSettings


def leaving_pods(snapshot: observe.Snapshot, desired: int) -> set[str]:
    return {n for n in snapshot.pods_of(names.ROLE_MM) if names.pod_ordinal(n) >= desired}


def finish_scale_down(settings: ClusterSettings, leaving: set[str], p: Plan, logger: Any) -> None:
    """Shrink the MM StatefulSet once every MM that goes holds no replica any more."""
    if not leaving or not leaving <= set(p.safe_to_remove):
        return
    kube.merge_patch(
        "apps/v1",
        "StatefulSet",
        settings.namespace,
        names.statefulset_name(settings.name, names.ROLE_MM),
        {"spec": {"replicas": settings.mm_replicas}},
    )
    logger.info("MMs %s evacuated: StatefulSet scaled to %d", sorted(leaving), settings.mm_replicas)


async def reconcile_scale_down(
    snapshot: observe.Snapshot, state: ClusterState, settings: ClusterSettings, result: Plan, logger: Any
) -> ScaleDownBlock | None:
    """Finish a scale-down the round's plan completed; the block that refuses it, if any."""
    leaving = leaving_pods(snapshot, settings.mm_replicas)
    block = blocked_scale_down(state) if leaving else None
    if leaving and block is None:
        await asyncio.to_thread(finish_scale_down, settings, leaving, result, logger)
    return block
