"""Failover: what happens to a partition when MMs holding its replicas are lost.

* The primary is lost: promote the in-sync replica with the longest log (ties: lowest rank) at
  ``epoch + 1`` and drop the lost MMs. A fixed partition keeps serving its producers; an on-demand
  one only drains from then on (see ``ondemand.start_draining``).
* No in-sync replica is alive: the partition has no primary (offline) and keeps its replica and
  in-sync lists, so that the first in-sync replica to return is promoted. Out-of-sync replicas are
  never promoted.
* A backup is lost: drop it; ``placement.fill_replicas`` adds a replacement on another MM.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from hybridmq.api.resources import FailoverRecord, PartitionState
from hybridmq.planner.draft import Context, Draft
from hybridmq.planner.ondemand import start_draining
from hybridmq.planner.placement import Load

__all__ = ["best_candidate", "hand_over", "handle_lost_replicas"]


def best_candidate(draft: Draft, allowed: Callable[[str], bool]) -> str | None:
    """The in-sync replica (other than the current primary) with the longest log, ties by rank."""
    best: str | None = None
    best_key: tuple[int, int] | None = None
    for rank, mm in enumerate(draft.replicas):
        if mm == draft.primary or mm not in draft.in_sync or not allowed(mm):
            continue
        key = (-draft.offset_of(mm), rank)
        if best_key is None or key < best_key:
            best, best_key = mm, key
    return best


def refresh_offsets(draft: Draft, ctx: Context, mms: Iterable[str]) -> None:
    """Take the MMs' own reports of their log end offsets over what the status last recorded."""
    for mm in mms:
        off = ctx.reported_offset(mm, draft.name)
        if off is not None:
            draft.replica_offsets[mm] = off


def hand_over(
    draft: Draft, ctx: Context, load: Load, new: str, reason: str, duration: float, lost: str | None = None
) -> None:
    """Make ``new`` the primary at the next epoch and record the failover (of ``lost``, by default
    the current primary)."""
    old = draft.primary
    draft.promote(new)
    load.move_primary(old, new)
    draft.last_failover = FailoverRecord(
        from_=old if lost is None else lost,
        to=new,
        reason=reason,
        duration_seconds=round(duration, 3),
        time=ctx.now,
    )


def offline_since(draft: Draft) -> FailoverRecord | None:
    """The record of the loss that left the partition without a primary, if that is its state."""
    last = draft.last_failover
    if draft.primary is None and last is not None and last.left_offline and last.time:
        return last
    return None


def handle_lost_replicas(draft: Draft, ctx: Context, load: Load) -> None:
    """Fail over a partition whose primary is lost (or which has none), drop lost backups."""
    if draft.deleting or not draft.placed or draft.state == PartitionState.DRAINED:
        return
    lost = [r for r in draft.replicas if not ctx.is_alive(r)]
    primary_ok = draft.primary is not None and ctx.is_alive(draft.primary)
    if primary_ok:
        for mm in lost:
            draft.drop(mm)
            load.remove(mm)
            draft.event("ReplicaLost", f"backup {mm} lost ({ctx.lost_reason(mm)}); dropped", warning=True)
        if lost and not draft.is_on_demand and draft.state == PartitionState.ACTIVE:
            draft.state = PartitionState.MIGRATING  # Active again once a replacement is placed
        return
    if not lost and draft.primary is not None:
        return
    old = draft.primary
    refresh_offsets(draft, ctx, draft.in_sync)
    new = best_candidate(draft, ctx.is_alive)
    if new is None:
        if old is not None:
            # Offline: keep replicas and in-sync replicas so that the first to return takes over.
            load.remove(old, primary=True)
            load.add(old)
            draft.primary = None
            if not draft.is_on_demand and draft.state != PartitionState.PENDING:
                draft.state = PartitionState.MIGRATING
            elif draft.is_on_demand:
                start_draining(draft, ctx, f"its primary {old} was lost")
            draft.last_failover = FailoverRecord(
                from_=old,
                to=None,
                reason=ctx.lost_reason(old),
                duration_seconds=round(ctx.lost_for_seconds(old), 3),
                time=ctx.now,
            )
            draft.event(
                "PartitionOffline",
                f"primary {old} lost ({ctx.lost_reason(old)}) and no in-sync replica is alive; "
                "waiting for one to return",
                warning=True,
            )
        return
    lost_from = None
    if old is not None:
        reason = ctx.lost_reason(old)
        duration = ctx.lost_for_seconds(old)
    elif (offline := offline_since(draft)) is not None and offline.time is not None:
        # Back from offline: the end of the failover that took the partition offline, as long as
        # from that loss, so the lost MM's failover is complete once its last partition has a primary.
        lost_from, reason = offline.from_, offline.reason
        duration = offline.duration_seconds + max(0.0, (ctx.now - offline.time).total_seconds())
    else:
        reason = "in-sync replica returned"
        duration = 0.0
    hand_over(draft, ctx, load, new, reason, duration, lost=lost_from)
    for mm in [r for r in draft.replicas if not ctx.is_alive(r)]:
        draft.drop(mm)
        load.remove(mm)
    offset = draft.offset_of(new)
    draft.event(
        "FailedOver",
        f"primary {old or 'none'} -> {new} at epoch {draft.epoch} ({reason}; log end "
        f"{offset if offset >= 0 else 'unknown'}); dropped lost replicas {', '.join(lost) or 'none'}",
        warning=True,
    )
    if draft.is_on_demand:
        start_draining(draft, ctx, f"its primary {old or 'none'} was lost")
    elif draft.state in (PartitionState.ACTIVE, PartitionState.PENDING):
        draft.state = PartitionState.MIGRATING  # Active again once the replica count is restored
