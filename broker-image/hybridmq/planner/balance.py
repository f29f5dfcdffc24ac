"""Balance: fixed partitions' primaries spread over the MMs (max - min <= 1), moved back after
restarts and scale-ups with the graceful handoff's steps, one partition at a time.

A restarted MM comes back holding nothing (its replicas were replaced while it was away) and a new
MM starts empty, so primaries pile onto the MMs that stayed. Each round, once the cluster is
settled - no MM lost, stopping or leaving, every replica in sync, every primary reporting at its
current epoch (the previous step took effect) - and the MM leading the most fixed partitions (hi)
leads at least two more than the one leading the fewest (lo):

1. if a partition led by hi has an in-sync copy on lo, lo becomes its primary at ``epoch + 1`` (the
   old primary stays an in-sync backup; producers resend there as after a handoff);
2. else lo gets an extra copy of a partition led by hi; once it is in sync, ``trim_extra`` removes
   the copy on the MM holding the most replicas and step 1 hands the primary over.

Waiting for every primary's report at its epoch paces the moves (one per confirmed step) and keeps
the plan idempotent: planning again on its own result, before the brokers answer, changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hybridmq.api.resources import PartitionState
from hybridmq.planner.draft import Context, Draft
from hybridmq.planner.failover import hand_over
from hybridmq.planner.placement import Load
from hybridmq.planner.state import ReplicaReport, natural_key

__all__ = ["rebalance"]

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


def rebalance(
    drafts: Sequence[Draft], ctx: Context, load: Load, reports: Mapping[str, ReplicaReport | None]
) -> None:
    """At most one balancing step per round (see the module docstring)."""
    if ctx.moving_off or len(ctx.eligible) < 2 or any(not m.alive for m in ctx.mms.values()):
        return
    fixed = [d for d in drafts if not d.deleting and not d.is_on_demand and d.placed]
    if not fixed or not _settled(fixed, ctx, reports):
        return
    counts = dict.fromkeys(ctx.eligible, 0)
    for d in fixed:
        if d.primary in counts:
            counts[d.primary] += 1
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
