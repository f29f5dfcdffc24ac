"""Quiet rounds: a cluster at rest costs the operator next to nothing, however many partitions.

A reconcile round reads every Partition, MM and report and plans them; at thousands of partitions
that is most of the operator's CPU, even when nothing happens. A round is skipped when:

* everything it would read is what the last full round read: the BrokerCluster (its
  resourceVersion), every pod, StatefulSet and Partition (by identity: the indexes keep a new copy
  for every watch event, and an old copy is kept here, so its identity cannot be reused), and every
  MM Lease apart from its renewal time (renewals come every few seconds and change nothing else);
* that round left nothing in flight (``settled``): it planned no change, every MM was alive, ready
  and not stopping, no roll step or scale-down was under way, no write waits for the watch, and no
  drained partition waits for its retention to end (the one decision that time alone makes);
* no Lease has run out (an MM is lost when its Lease has, so the round that could first see a
  loss always runs in full: quiet rounds never delay a failover);
* the last full round is younger than ``MAX_QUIET_S``: a safety net, the longest anything the
  rounds above do not foresee (a node's labels, say) goes unseen.

A quiet cluster's daemon does not even poll (``QuietRounds.sleep_for``): it sleeps until the
earliest MM Lease could run out or the safety bound ends, and the watch events of what a round reads
wake it sooner (a pod at once; a Partition, a Lease whose content changed, a StatefulSet or the
BrokerCluster no sooner than the usual interval after the last round).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from hybridmq.planner.roll import RollDecision
from hybridmq.planner.state import MessageManager, PartitionInfo
from hybridmq_operator import observe

Body = Mapping[str, Any]

MAX_QUIET_S = 30.0
# A Lease this close to its end counts as run out, and a quiet daemon sleeps this much past the
# end: a timer that fires a little early still finds the Lease over (and its MM lost) at once.
EXPIRY_MARGIN_S = 0.05


def lease_shape(lease: Body) -> tuple[Any, ...]:
    """A Lease without what every renewal changes (renewTime, resourceVersion)."""
    meta = lease.get("metadata") or {}
    spec = {k: v for k, v in (lease.get("spec") or {}).items() if k != "renewTime"}
    return (meta.get("name"), meta.get("uid"), meta.get("annotations"), meta.get("labels"), spec)


def _same_objects(a: Sequence[object], b: Sequence[object]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


@dataclass(frozen=True)
class Inputs:
    """What a round reads, in a form that compares cheaply with the last full round's."""

    cluster_version: str
    pods: tuple[Body, ...]
    statefulsets: tuple[Body, ...]
    partitions: tuple[Body, ...]
    leases: tuple[tuple[Any, ...], ...]
    lease_expiry: datetime | None  # the earliest

    @classmethod
    def of(
        cls,
        cluster: Body,
        pods: tuple[Body, ...],
        leases: Iterable[Body],
        partitions: tuple[Body, ...],
        statefulsets: tuple[Body, ...],
        watching_since: datetime | None = None,
    ) -> Inputs:
        """``watching_since``: this operator's first round; a Lease ends no earlier than one duration
        after it (``observe.lease_expiry``), as the round's own observation counts it."""
        leases = tuple(leases)
        expiries = [e for e in (observe.lease_expiry(x, watching_since) for x in leases) if e is not None]
        return cls(
            cluster_version=str((cluster.get("metadata") or {}).get("resourceVersion") or ""),
            pods=pods,
            statefulsets=statefulsets,
            partitions=partitions,
            leases=tuple(lease_shape(lease) for lease in leases),
            lease_expiry=min(expiries, default=None),
        )

    def same_as(self, other: Inputs) -> bool:
        return (
            self.cluster_version == other.cluster_version
            and _same_objects(self.pods, other.pods)
            and _same_objects(self.statefulsets, other.statefulsets)
            and _same_objects(self.partitions, other.partitions)
            and self.leases == other.leases
        )


def roll_idle(roll: RollDecision | None, watched: bool) -> bool:
    """No roll step this round: nothing to mark, unmark or delete and no pod on an older revision
    (``watched``: the operator watches StatefulSets; without them there is no roll; ``roll`` None: a
    revision was not known yet, so the round cannot say the roll is idle)."""
    if not watched:
        return True
    return (
        roll is not None
        and not roll.rolling
        and roll.mark is None
        and roll.unmark is None
        and roll.delete is None
    )


def retention_pending(partitions: Iterable[PartitionInfo]) -> bool:
    """Some drained partition waits for its retention to end: time alone will delete it."""
    return any(p.status is not None and p.status.drained_since is not None for p in partitions)


def settled(
    *,
    changes_planned: bool,
    applied: bool,
    waiting_for_mms: bool,
    scale_down_blocked: bool,
    roll_is_idle: bool,
    unwatched_writes: bool,
    follow_ups: bool,
    planned: bool,
    retention_pending: bool,
    mms: Iterable[MessageManager],
) -> bool:
    """Whether a full round left nothing in flight, so that the next may be skipped if it would read
    the same: no change planned (figure updates the throttle held back count: they fall due
    within seconds, by time alone) and every planned one applied; not waiting for the first MMs; no
    scale-down refused; no roll step; no write that the watch has not shown back yet and no follow-up
    of one; the round planned at all (``planned``: its plan's fingerprint is kept); no drained
    partition waiting for its retention to end (time alone decides its deletion); and every MM
    alive, ready, accounted for and not stopping (a stopping MM hands off as its Lease says)."""
    return (
        not changes_planned
        and applied
        and not waiting_for_mms
        and not scale_down_blocked
        and roll_is_idle
        and not unwatched_writes
        and not follow_ups
        and planned
        and not retention_pending
        and all(m.alive and m.ready and m.accounted and not m.stopping for m in mms)
    )


class QuietRounds:
    """The last full round's inputs and whether it left the cluster settled."""

    def __init__(self, max_quiet_s: float = MAX_QUIET_S) -> None:
        self.max_quiet_s = max_quiet_s
        self.last: Inputs | None = None
        self.settled = False
        self.full_round_at = float("-inf")
        self.skipped = 0
        self.lease_expiry: datetime | None = None  # the earliest, as the last round read them

    def skip(self, inputs: Inputs, monotonic: float, now: datetime) -> bool:
        """Whether this round may be skipped (``monotonic``: time.monotonic(); ``now``: wall clock
        in UTC, the Leases' clock)."""
        self.lease_expiry = inputs.lease_expiry
        last = self.last
        if last is None or not self.settled or monotonic - self.full_round_at >= self.max_quiet_s:
            return False
        ends = inputs.lease_expiry
        if ends is not None and ends <= now + timedelta(seconds=EXPIRY_MARGIN_S):
            return False
        if not inputs.same_as(last):
            return False
        self.skipped += 1
        return True

    def full_round(self, inputs: Inputs, settled: bool, monotonic: float) -> None:
        """A full round ran on ``inputs``; ``settled``: it left nothing in flight."""
        self.last, self.settled, self.full_round_at = inputs, settled, monotonic
        self.lease_expiry = inputs.lease_expiry

    def sleep_for(self, monotonic: float, now: datetime, interval_s: float) -> float:
        """How long the daemon may sleep unless an event wakes it: ``interval_s`` while anything is
        in flight; on a settled cluster until the next round could no longer be skipped: just
        after the earliest Lease runs out (unless renewed meanwhile, which the round then sees)
        or when the safety bound ends. A killed MM is seen lost by the round that wakes at its
        Lease's end, earlier than by rounds every ``interval_s``."""
        if self.last is None or not self.settled:
            return interval_s
        until = self.full_round_at + self.max_quiet_s - monotonic
        if self.lease_expiry is not None:
            until = min(until, (self.lease_expiry - now).total_seconds() + EXPIRY_MARGIN_S)
        return max(interval_s, until)

    def reset(self) -> None:
        """The last round failed: the next one runs in full."""
        self.last, self.settled = None, False
