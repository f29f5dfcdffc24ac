"""Balance: fixed partitions' primaries spread over the MMs (max - min <= 1), moved back after
restarts and scale-ups with the graceful handoff's steps, one partition at a time.

A restarted MM comes back holding nothing (its replicas were replaced while it was away) and a new
MM starts empty, so primaries pile onto the MMs that stayed. Each round, once the cluster is
settled - no MM lost, stopping or leaving, every replica in sync, every primary reporting at its
current epoch (the previous step took effect) - and the MM leading the most fixed partitions (hi)
leads at least two more than the one leading the fewest (lo):

1. if a partition led by hi has an in-sync copy on lo, lo becomes its primary at ``epoch + 1`` (the
   old primary stays an in-sync backup; producers resend there as after a handoff);
2. else lo gets an extra copy of a partition led by hi; once it is in sync, step 1 hands it the
   primary and, in the same round (``plan()`` balances before it trims), ``trim_extra`` removes a
   surplus backup: never the new primary.

Until then ``trim_extra`` leaves a partition alone while it holds a surplus copy that could take
its primary (``awaiting_handover``): lo leads the fewest partitions but may hold the most replicas
(backups of others), so trimming by load would remove exactly that copy, and the next settled
round would add it again, for ever.

Waiting for every primary's report at its epoch paces the moves (one per confirmed step) and keeps
the plan idempotent: planning again on its own result, before the brokers answer, changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from hybridmq.api.resources import PartitionState
from hybridmq.planner.draft import Context, Draft
from hybridmq.planner.failover import hand_over
from hybridmq.planner.placement import Load
from hybridmq.planner.state import ReplicaReport, natural_key

__all__ = ["awaiting_handover", "rebalance"]

HANDOFF_REASON = "graceful handoff: balancing primaries"


def _settled(fixed: Sequence[Draft], ctx: Context, reports: Mapping[str, ReplicaReport | None]) -> bool:
    for d in fixed:
        if d.primary is None or d.state != PartitionState.ACTIVE:
            return False
        if any(not ctx.is_alive(r) for r in d.replicas) or set(d.in_sync) != set(d.replicas):
            return False
        rep = reports.get(d.name)
        if rep is None or rep.epoch != d.epoch or rep.reporter != d.primary:
            return False
    return True


def _may_balance(ctx: Context) -> bool:
    """No MM lost, stopping or leaving, and at least two to balance over."""
    return not ctx.moving_off and len(ctx.eligible) >= 2 and all(m.alive for m in ctx.mms.values())


def _placed_fixed(drafts: Iterable[Draft]) -> list[Draft]:
    return [d for d in drafts if not d.deleting and not d.is_on_demand and d.placed]


def _led(fixed: Iterable[Draft], ctx: Context) -> dict[str, int]:
    """Fixed partitions led by each eligible MM."""
    counts = dict.fromkeys(ctx.eligible, 0)
    for d in fixed:
        if d.primary in counts:
            counts[d.primary] += 1
    return counts


def awaiting_handover(drafts: Sequence[Draft], ctx: Context) -> frozenset[str]:
    """Fixed partitions holding more copies than their target, one of them on an MM that leads at
    least two fixed partitions fewer than their primary: balancing hands that copy the primary
    once the cluster is settled, so surplus copies are trimmed only after it did."""
    if not _may_balance(ctx):
        return frozenset()
    fixed = _placed_fixed(drafts)
    led = _led(fixed, ctx)
    waiting = set()
    for d in fixed:
        if d.primary not in led or len(d.replicas) <= d.target:
            continue
        if any(r in led and led[d.primary] - led[r] >= 2 for r in d.replicas):
            waiting.add(d.name)
    return frozenset(waiting)


def rebalance(
    drafts: Sequence[Draft], ctx: Context, load: Load, reports: Mapping[str, ReplicaReport | None]
) -> None:
    """At most one balancing step per round (see the module docstring)."""
    if not _may_balance(ctx):
        return
    fixed = _placed_fixed(drafts)
    if not fixed or not _settled(fixed, ctx, reports):
        return
    counts = _led(fixed, ctx)
    by_name = sorted(counts, key=natural_key)  # ties: the first in natural order
    hi = max(by_name, key=counts.__getitem__)
    lo = min(by_name, key=counts.__getitem__)
    if counts[hi] - counts[lo] <= 1:
        return
    led = sorted((d for d in fixed if d.primary == hi), key=lambda d: natural_key(d.name))
    why = f"{hi} led {counts[hi]} fixed partitions, {lo} {counts[lo]}"
    for d in led:
        if lo in d.in_sync:
            hand_over(d, ctx, load, lo, f"{HANDOFF_REASON} ({why})", 0.0)
            d.event("PrimaryBalanced", f"primary {hi} -> {lo} at epoch {d.epoch}: {why}")
            return
    for d in led:
        if lo not in d.replicas:
            d.replicas.append(lo)
            load.add(lo)
            load.pair(hi, lo)
            d.event("ReplicaPlaced", f"added backup {lo} to move the primary off {hi} once in sync: {why}")
            return
