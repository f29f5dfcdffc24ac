"""The on-demand partition lifecycle (see docs/design.md, failover and the partition lifecycle).

* Every eligible MM keeps ``perMessageManager`` writable on-demand partitions with their primary on
  it: a new (or returning) MM gets its own (FIG. 7).
* When its primary is lost (or leaves), an on-demand partition is taken over only to be drained:
  state Draining, writes refused unless ``acceptWritesAfterFailover``; its producers move to
  another on-demand partition (``pick_on_demand_partition``).
* Draining and empty (no producer attached - they moved and confirmed what it stores -, backlog
  zero, every named reader cursor at the end) for ``retentionAfterDrainSeconds`` -> Drained ->
  deleted; the finalizer is released once no live MM holds its data.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable, Mapping

from hybridmq.api.assignment import PartitionAssignment, PartitionState, PartitionType
from hybridmq.api.resources import PARTITION_FINALIZER, PartitionSpec
from hybridmq.planner.draft import Context, Draft
from hybridmq.planner.placement import Load, pick_backups

__all__ = [
    "collect_garbage",
    "data_holders",
    "drain_blockers",
    "ondemand_name",
    "pick_on_demand_partition",
    "reassign_producers",
    "start_draining",
    "top_up",
]

_B36 = "0123456789abcdefghijklmnopqrstuvwxyz"


def _base36(n: int) -> str:
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = _B36[r] + out
        if n == 0:
            return out


def ondemand_name(cluster: str, stamp_ms: int, index: int) -> str:
    """Unique, never reused name: ``<cluster>-od-<time in base 36>-<index>``."""
    return f"{cluster}-od-{_base36(stamp_ms)}-{index}"


def start_draining(draft: Draft, ctx: Context, why: str) -> None:
    """Stop giving this on-demand partition to producers; it serves consumers until empty."""
    if draft.state in (PartitionState.DRAINING, PartitionState.DRAINED):
        return
    draft.state = PartitionState.DRAINING
    draft.accept_writes = ctx.spec.partitions.on_demand.accept_writes_after_failover
    mode = "still accepting writes" if draft.accept_writes else "no new writes"
    draft.event("Draining", f"on-demand partition drains because {why} ({mode}); producers move")


def _writable_primary(draft: Draft) -> str | None:
    if (
        draft.is_on_demand
        and not draft.deleting
        and draft.state == PartitionState.ACTIVE
        and draft.accept_writes
        and draft.primary is not None
    ):
        return draft.primary
    return None


def top_up(ctx: Context, drafts: Iterable[Draft], load: Load) -> list[Draft]:
    """New on-demand partitions so that each eligible MM is primary of ``perMessageManager``
    writable ones. Returns the new drafts (already placed)."""
    od = ctx.spec.partitions.on_demand
    per_mm = od.per_message_manager
    if per_mm <= 0 or not ctx.eligible:
        return []
    have: dict[str, int] = dict.fromkeys(ctx.eligible, 0)
    for d in drafts:
        p = _writable_primary(d)
        if p is not None and p in have:
            have[p] += 1
    fixed = ctx.spec.partitions.fixed
    min_in_sync = min(fixed.min_in_sync, od.replicas)
    stamp = int(ctx.now.timestamp() * 1000)
    created: list[Draft] = []
    index = 0
    for mm in ctx.eligible:
        for _ in range(per_mm - have[mm]):
            name = ondemand_name(ctx.cluster, stamp, index)
            index += 1
            spec = PartitionSpec(
                cluster=ctx.cluster,
                type=PartitionType.ON_DEMAND,
                replicas=od.replicas,
                min_in_sync=min_in_sync,
            )
            draft = Draft.new(name, spec)
            backups = pick_backups(od.replicas - 1, ctx.eligible, load, exclude={mm}, primary=mm)
            draft.primary = mm
            draft.replicas = [mm, *backups]
            draft.in_sync = list(draft.replicas)
            draft.state = PartitionState.ACTIVE
            load.add(mm, primary=True)
            for b in backups:
                load.add(b)
            draft.event(
                "OnDemandCreated",
                f"on-demand partition for {mm} (primary {mm}, backups {', '.join(backups) or 'none'})",
            )
            created.append(draft)
    return created


def data_holders(draft: Draft, ctx: Context) -> list[str]:
    """Live MMs that may still hold the partition's data on disk."""
    holders = []
    for mm in ctx.state.message_managers:
        if not mm.alive:
            continue
        if mm.stored is None:
            if mm.name in draft.replicas:
                holders.append(mm.name)
        elif draft.name in mm.stored:
            holders.append(mm.name)
    return holders


def drain_blockers(draft: Draft) -> list[str]:
    """Why a draining partition may not be deleted yet, from its primary's current report: someone
    may still need its data (empty when none)."""
    why = []
    if draft.producers > 0:
        why.append(f"{draft.producers} producer(s) attached or not yet confirmed what it stores")
    if draft.backlog > 0:
        why.append(f"backlog {draft.backlog}")
    if draft.reader_lag > 0:
        why.append(f"a named reader is {draft.reader_lag} record(s) behind")
    return why


def collect_garbage(draft: Draft, ctx: Context) -> tuple[bool, bool]:
    """Advance a draining on-demand partition. Returns (delete it, release its finalizer).

    Deleted only once its primary (alive, at the current epoch) reports it empty - no producer
    attached (they moved and confirmed what it stores), backlog zero, every named reader cursor at
    the end - and it stayed so for ``retentionAfterDrainSeconds`` (``drained_since`` is when it was
    first seen empty; it is cleared when that stops holding)."""
    if draft.deleting:
        if PARTITION_FINALIZER in draft.finalizers and not data_holders(draft, ctx):
            return False, True
        return False, False
    if not draft.is_on_demand:
        return False, False
    if draft.state != PartitionState.DRAINING:
        return draft.state == PartitionState.DRAINED, False
    if draft.primary is None or not ctx.is_alive(draft.primary) or draft.reported_epoch != draft.epoch:
        # No current figures (e.g. taken over again): emptiness must be seen anew by the new primary.
        draft.drained_since = None
    else:
        retention = ctx.spec.partitions.on_demand.retention_after_drain_seconds
        blockers = drain_blockers(draft)
        if blockers:
            draft.drained_since = None
        elif draft.drained_since is None:
            draft.drained_since = ctx.now
            if retention > 0:
                draft.event(
                    "DrainedEmpty", f"empty; kept {retention}s (retentionAfterDrainSeconds) before deletion"
                )
        if draft.drained_since is not None and (ctx.now - draft.drained_since).total_seconds() >= retention:
            draft.state = PartitionState.DRAINED
            draft.accept_writes = False
            draft.event(
                "Drained",
                "no producer attached, backlog zero, every named reader at the end "
                f"for {retention}s; deleting the partition",
            )
    return draft.state == PartitionState.DRAINED, False


def _rendezvous(producer_id: str, partition: str) -> int:
    digest = hashlib.blake2b(f"{producer_id}\0{partition}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def _writable_on_demand(
    partitions: Iterable[PartitionAssignment], live_mms: Collection[str] | None, exclude: Collection[str]
) -> list[PartitionAssignment]:
    return [
        p
        for p in partitions
        if p.type == PartitionType.ON_DEMAND
        and p.writable
        and p.name not in exclude
        and (live_mms is None or p.primary in live_mms)
    ]


def pick_on_demand_partition(
    partitions: Iterable[PartitionAssignment],
    producer_id: str,
    producer_counts: Mapping[str, int] | None = None,
    exclude: Collection[str] = (),
    live_mms: Collection[str] | None = None,
) -> str | None:
    """The on-demand partition a producer should (move to and) write to.

    Among writable on-demand partitions (Active, accepting writes, primary on a live MM when
    ``live_mms`` is given, not in ``exclude``): the one with the fewest attached producers; ties go
    to a per-producer rendezvous hash so that producers failing over together spread out. None
    when there is none (the operator is creating one: retry).
    """
    counts = producer_counts or {}
    choices = _writable_on_demand(partitions, live_mms, exclude)
    if not choices:
        return None
    best = min(choices, key=lambda p: (counts.get(p.name, 0), -_rendezvous(producer_id, p.name)))
    return best.name


def reassign_producers(
    producers: Mapping[str, str],
    partitions: Iterable[PartitionAssignment],
    live_mms: Collection[str] | None = None,
) -> dict[str, str | None]:
    """``producers`` maps producer id -> its on-demand partition. Returns the moves for those whose
    partition no longer takes writes (draining, lost, gone), balancing by producer count.
    The value is None when no writable on-demand partition exists."""
    table = list(partitions)
    writable = {p.name for p in _writable_on_demand(table, live_mms, ())}
    counts: dict[str, int] = {}
    for part in producers.values():
        if part in writable:
            counts[part] = counts.get(part, 0) + 1
    moves: dict[str, str | None] = {}
    for producer in sorted(producers):
        if producers[producer] in writable:
            continue
        target = pick_on_demand_partition(table, producer, counts, live_mms=live_mms)
        moves[producer] = target
        if target is not None:
            counts[target] = counts.get(target, 0) + 1
    return moves
