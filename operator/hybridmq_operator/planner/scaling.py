"""Scaling: fixed partitions up to ``partitions.fixed.count``, evacuation of MMs that will be
removed by a scale-down, and trimming replica sets that grew past their target.

Evacuation of a replica on a leaving MM, step by step (each step idempotent, level-based):
1. add a replacement backup on an eligible MM (it starts out of sync and catches up);
2. if the primary is leaving, hand it over to an in-sync replica that stays (epoch + 1); an
   on-demand partition whose primary leaves drains instead of taking new writes;
3. once the staying replicas are in sync, drop the leaving ones.
A leaving MM that holds no replica any more is safe to remove.
"""

from __future__ import annotations

from collections.abc import Iterable

from hybridmq.api.resources import PartitionSpec, PartitionState, PartitionType
from hybridmq_operator.planner.draft import Context, Draft
from hybridmq_operator.planner.failover import best_candidate, hand_over, refresh_offsets
from hybridmq_operator.planner.ondemand import start_draining
from hybridmq_operator.planner.placement import Load, pick_backups, place_new

__all__ = ["create_fixed", "evacuate", "fixed_name", "safe_to_remove", "trim_extra"]


def fixed_name(cluster: str, index: int) -> str:
    return f"{cluster}-fixed-{index}"


def create_fixed(ctx: Context, existing: Iterable[str], load: Load) -> list[Draft]:
    """Drafts for the fixed partitions ``0 .. count-1`` that do not exist yet, placed when possible.
    Fixed partitions are never deleted by the planner, even if the count shrinks."""
    names = set(existing)
    fixed = ctx.spec.partitions.fixed
    out: list[Draft] = []
    for i in range(fixed.count):
        name = fixed_name(ctx.cluster, i)
        if name in names:
            continue
        spec = PartitionSpec(
            cluster=ctx.cluster,
            type=PartitionType.FIXED,
            replicas=fixed.replicas,
            min_in_sync=fixed.min_in_sync,
        )
        draft = Draft.new(name, spec)
        place_new(draft, ctx, load)
        out.append(draft)
    return out


def evacuate(draft: Draft, ctx: Context, load: Load) -> None:
    """Move the replicas of ``draft`` off leaving MMs (see the module docstring)."""
    if draft.deleting or not draft.placed or draft.state == PartitionState.DRAINED:
        return
    leaving = [r for r in draft.replicas if r in ctx.leaving]
    if not leaving:
        return
    if draft.primary is None:
        return  # offline: failover promotes an in-sync replica first
    if draft.is_on_demand and draft.primary in leaving:
        start_draining(draft, ctx, f"its primary {draft.primary} is being removed")
    need = 1 if draft.draining else draft.target
    staying = [r for r in draft.replicas if r not in ctx.leaving]
    # 1. replacements
    if len(staying) < need:
        added = pick_backups(
            need - len(staying), ctx.eligible, load, exclude=set(draft.replicas), primary=draft.primary
        )
        for b in added:
            draft.replicas.append(b)
            staying.append(b)
            load.add(b)
        if added:
            draft.event(
                "ReplicaPlaced",
                f"added backup {', '.join(added)} to move replicas off {', '.join(leaving)} (scale-down)",
            )
    # 2. primary hand-over
    if draft.primary in ctx.leaving:
        refresh_offsets(draft, ctx, draft.in_sync)
        new = best_candidate(draft, lambda mm: mm in staying and ctx.is_alive(mm))
        if new is None:
            return  # wait until a staying replica is in sync
        old = draft.primary
        hand_over(draft, ctx, load, new, f"evacuating {old} (scale-down)", 0.0)
        draft.event("PrimaryMoved", f"primary {old} -> {new} at epoch {draft.epoch}: {old} is being removed")
    # 3. drop leaving replicas once what stays is in sync
    in_sync_staying = [r for r in staying if r in draft.in_sync]
    if in_sync_staying and len(in_sync_staying) >= min(need, len(staying)):
        for mm in leaving:
            draft.drop(mm)
            load.remove(mm)
        draft.event("ReplicaMoved", f"dropped replicas on {', '.join(leaving)}: the staying ones are in sync")


def trim_extra(draft: Draft, ctx: Context, load: Load) -> None:
    """Remove backups beyond the target (e.g. after spec.replicas shrank): out-of-sync ones first,
    then the lowest ranked. Never the primary, never while an evacuation is running."""
    if draft.deleting or draft.draining or draft.primary is None:
        return
    if any(r in ctx.leaving for r in draft.replicas):
        return
    excess = len(draft.replicas) - draft.target
    if excess <= 0:
        return
    backups = [r for r in draft.replicas if r != draft.primary]
    # Out of sync first, then by rank from the end.
    order = sorted(backups, key=lambda r: (r in draft.in_sync, -draft.rank(r)))
    removed = order[:excess]
    for mm in removed:
        draft.drop(mm)
        load.remove(mm)
    draft.event("ReplicaRemoved", f"removed backup {', '.join(removed)}: more than {draft.target} replicas")


def safe_to_remove(ctx: Context, drafts: Iterable[Draft]) -> tuple[frozenset[str], frozenset[str]]:
    """(leaving MMs holding no replica, leaving MMs still holding replicas)."""
    busy: set[str] = set()
    for d in drafts:
        if d.deleting or d.state == PartitionState.DRAINED:
            continue
        busy.update(r for r in d.replicas if r in ctx.leaving)
    return frozenset(ctx.leaving - busy), frozenset(busy)
