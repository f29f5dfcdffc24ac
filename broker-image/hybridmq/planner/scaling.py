"""Scaling: fixed partitions up to ``partitions.fixed.count``, evacuation of MMs that will be
removed by a scale-down, and trimming replica sets that grew past their target.

Evacuation of a replica on a leaving MM (scale-down) or a stopping one (graceful handoff: the MM
got SIGTERM and waits for this before it exits), step by step (each step idempotent, level-based):
1. add a replacement backup on an eligible MM (it starts out of sync and catches up);
2. if the primary is leaving, hand it over to an in-sync replica that stays (epoch + 1) at once:
   the old primary stays an in-sync backup, so the partition keeps its copies meanwhile; an
   on-demand partition whose primary leaves drains instead of taking new writes;
3. once the staying replicas are in sync, drop the leaving ones.
A leaving MM that holds no replica any more is safe to remove; a stopping one may exit.

A scale-down never leaves a partition with fewer copies than its minInSync: when the MMs that stay
cannot hold that many, ``blocked_scale_down`` says so, ``plan()`` plans as if no MM were leaving
(nothing is moved; a lost replica is replaced as usual) and the handler keeps the StatefulSet and
says so in the status.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from hybridmq.api.resources import BrokerClusterSpec, PartitionSpec, PartitionState, PartitionType
from hybridmq.planner.domains import awaiting_spread, shares_domain
from hybridmq.planner.draft import Context, Draft
from hybridmq.planner.failover import best_candidate, hand_over, refresh_offsets
from hybridmq.planner.ondemand import start_draining
from hybridmq.planner.placement import Load, pick_backups, place_new
from hybridmq.planner.state import ClusterState, natural_key

__all__ = [
    "ScaleDownBlock",
    "blocked_scale_down",
    "create_fixed",
    "evacuate",
    "fixed_name",
    "required_in_sync",
    "safe_to_remove",
    "trim_extra",
]


def required_in_sync(spec: PartitionSpec, cluster: BrokerClusterSpec) -> int:
    """The in-sync copies a partition's primary needs to acknowledge a write: its own minInSync,
    else the cluster's (what the brokers use, see ``hybridmq.broker.kube_source``)."""
    mis = spec.min_in_sync if spec.min_in_sync is not None else cluster.partitions.fixed.min_in_sync
    return max(1, mis)


@dataclass(frozen=True, slots=True)
class ScaleDownBlock:
    """A scale-down that would leave partitions with fewer copies than their minInSync."""

    partitions: tuple[str, ...]
    required: int  # the largest minInSync among them
    staying: int  # MMs that would be left

    @property
    def message(self) -> str:
        shown = ", ".join(self.partitions[:5]) + (" …" if len(self.partitions) > 5 else "")
        return (
            f"scale-down refused: {len(self.partitions)} partitions need {self.required} in-sync "
            f"copies (minInSync) but only {self.staying} message managers would stay ({shown}); "
            "their replicas stay where they are"
        )


def blocked_scale_down(state: ClusterState) -> ScaleDownBlock | None:
    """While MMs are leaving: the partitions whose minInSync copies the MMs that stay could not
    hold (None when the scale-down can go ahead). Every serving partition counts, wherever its
    replicas are now: after a failover they may all sit on staying MMs for a moment, and removing
    the others would still leave the partition short for good."""
    leaving = [m for m in state.message_managers if m.leaving]
    if not leaving:
        return None
    staying = len(state.message_managers) - len(leaving)
    blocked: list[tuple[str, int]] = []
    for info in state.partitions:
        st = info.status
        if info.deleting or (
            st is not None and st.state in (PartitionState.DRAINING, PartitionState.DRAINED)
        ):
            continue
        required = required_in_sync(info.spec, state.spec)
        if required > staying:
            blocked.append((info.name, required))
    if not blocked:
        return None
    names = tuple(sorted((n for n, _ in blocked), key=natural_key))
    return ScaleDownBlock(names, max(r for _, r in blocked), staying)


def fixed_name(cluster: str, index: int) -> str:
    return f"{cluster}-fixed-{index}"


def create_fixed(ctx: Context, existing: Iterable[str], load: Load, limit: int | None = None) -> list[Draft]:
    """Drafts for the fixed partitions ``0 .. count-1`` that do not exist yet, placed when possible,
    at most ``limit`` of them (the lowest indexes first; later rounds create the rest).
    Fixed partitions are never deleted by the planner, even if the count shrinks."""
    names = set(existing)
    fixed = ctx.spec.partitions.fixed
    out: list[Draft] = []
    for i in range(fixed.count):
        if limit is not None and len(out) >= limit:
            break
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
    """Move the replicas of ``draft`` off leaving and stopping MMs (see the module docstring)."""
    if draft.deleting or not draft.placed or draft.state == PartitionState.DRAINED:
        return
    leaving = [r for r in draft.replicas if r in ctx.moving_off]
    if not leaving:
        return
    if draft.primary is None:
        return  # offline: failover promotes an in-sync replica first
    if draft.is_on_demand and draft.primary in leaving:
        start_draining(draft, ctx, f"its primary {draft.primary} is being removed")
    need = 1 if draft.draining else draft.target
    staying = [r for r in draft.replicas if r not in ctx.moving_off]
    # 1. replacements
    if len(staying) < need:
        added = pick_backups(
            need - len(staying),
            ctx.eligible,
            load,
            exclude=set(draft.replicas),
            primary=draft.primary,
            spread_from=staying,
        )
        for b in added:
            draft.replicas.append(b)
            staying.append(b)
            load.add(b)
        if added:
            draft.event(
                "ReplicaPlaced",
                f"added backup {', '.join(added)} to move replicas off {', '.join(leaving)} "
                f"({', '.join(sorted({ctx.why_moving(mm) for mm in leaving}))})",
            )
    # 2. primary hand-over
    if draft.primary in ctx.moving_off:
        refresh_offsets(draft, ctx, draft.in_sync)
        new = best_candidate(draft, lambda mm: mm in staying and ctx.is_alive(mm))
        if new is None:
            return  # wait until a staying replica is in sync
        old = draft.primary
        if old in ctx.stopping:
            hand_over(draft, ctx, load, new, f"graceful handoff: {old} is stopping", 0.0)
            draft.event("HandedOff", f"primary {old} -> {new} at epoch {draft.epoch}: {old} is stopping")
        else:
            hand_over(draft, ctx, load, new, f"evacuating {old} (scale-down)", 0.0)
            draft.event(
                "PrimaryMoved", f"primary {old} -> {new} at epoch {draft.epoch}: {old} is being removed"
            )
    # 3. drop leaving replicas once what stays is in sync, and never below minInSync copies
    in_sync_staying = [r for r in staying if r in draft.in_sync]
    required = 1 if draft.draining else required_in_sync(draft.spec, ctx.spec)
    if in_sync_staying and len(in_sync_staying) >= max(required, min(need, len(staying))):
        for mm in leaving:
            draft.drop(mm)
            load.remove(mm)
        draft.event("ReplicaMoved", f"dropped replicas on {', '.join(leaving)}: the staying ones are in sync")


def trim_extra(draft: Draft, ctx: Context, load: Load, awaiting_handover: Collection[str] = ()) -> None:
    """Remove backups beyond the target (after spec.replicas shrank, a balancing copy caught up, see
    ``balance.py``, or a backup added to spread the replicas over failure domains is in sync) once
    every replica is in sync: those sharing a domain with another replica first, then those on the
    MMs holding the most replicas, then the lowest ranked. Never the primary, never while an
    evacuation is running, never while a surplus copy waits to take the primary from balancing
    (``awaiting_handover``: partition names, see ``balance.awaiting_handover``)."""
    if draft.deleting or draft.draining or draft.primary is None or draft.name in awaiting_handover:
        return
    if any(r in ctx.moving_off for r in draft.replicas):
        return
    excess = len(draft.replicas) - draft.target
    if excess <= 0 or awaiting_spread(draft, ctx):
        return
    if any(r not in draft.in_sync for r in draft.replicas):
        return  # a copy catching up (a balancing move) is kept until it is in sync
    backups = [r for r in draft.replicas if r != draft.primary]
    # Those sharing a failure domain with another replica first, then the most loaded MMs, then by
    # rank from the end.
    order = sorted(
        backups,
        key=lambda r: (
            not shares_domain(r, draft.replicas, ctx.domains),
            -load.replicas.get(r, 0),
            -draft.rank(r),
        ),
    )
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
