"""The adversarial suite's own checker: plain records of what happened in, verdict counts out.

Written without the delivery audit or the other tests' helpers so that a defect they share cannot
hide here. Everything is identified by the payload id the workload wrote into each message
(``<producer>:<n>``), never by broker-assigned ids alone.

Definitions (the README explains why):

* acknowledged = ``send`` returned an ``Ack``;
* found = seen by a consumer or in the final read of every partition by offset;
* stored twice = one payload id at two different ``(partition, offset)`` positions;
* order violation = in a fixed producer's partition, a payload stored below an earlier one of the
  same producer (or in another partition);
* acknowledged delivery = the broker confirmed the consumer's ACK (committed: it survives a
  failover) and no fault was in progress within ``settle_s`` either side of when it was sent; an
  ACK that was sent but refused or never answered (``STALE_DELIVERY``: delivered again by a new
  primary meanwhile, or its primary died) promises nothing, but the redelivery must still be flagged;
* delivered again = a later delivery of the same ``(partition, offset)`` to the same subscription
  (the queue, or the durable subscription of a topic);
* unflagged redelivery = any delivery after the first one of the same ``(partition, offset)`` to
  the same subscription without ``redelivered=True``.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Sent:
    producer: str
    n: int  # the producer's own counter: the order it sent in
    group: str  # the subscription that must receive it
    fixed: bool
    acked: bool


@dataclass(frozen=True, slots=True)
class Delivery:
    group: str
    payload: str
    partition: str
    offset: int
    redelivered: bool
    received_at: float
    acked_at: float | None  # when the consumer sent the ACK the broker then confirmed (None: not confirmed)
    ack_sent_at: float | None = None  # when the consumer sent the ACK, confirmed or not (None: never)


@dataclass(frozen=True, slots=True)
class Stored:
    payload: str
    partition: str
    offset: int


@dataclass(frozen=True, slots=True)
class LargeReceipt:
    """One complete read of a streamed message (first chunk to last), as the consumer saw it."""

    payload: str
    sha256: str
    size: int


@dataclass(slots=True)
class History:
    sent: list[Sent] = field(default_factory=list)
    deliveries: list[Delivery] = field(default_factory=list)
    stored: list[Stored] = field(default_factory=list)
    faults: list[tuple[float, float]] = field(default_factory=list)  # (start, end) on time.monotonic
    large_sent: dict[str, tuple[str, int]] = field(default_factory=dict)  # acked id -> (sha256, size)
    large_refused: int = 0
    large_receipts: list[LargeReceipt] = field(default_factory=list)
    large_partial: int = 0  # reads that did not start at the first chunk (resumed after a failure)
    large_stalled: int = 0  # reads whose next chunk never came
    stuck_tasks: int = 0  # load tasks that did not end when asked to (cancelled)
    read_errors: list[str] = field(default_factory=list)  # CMs that could not read every partition


def payload_id(producer: str, n: int) -> str:
    return f"{producer}:{n}"


def settled(t: float, faults: list[tuple[float, float]], settle_s: float) -> bool:
    return all(not (start - settle_s <= t <= end + settle_s) for start, end in faults)


def _near(faults: list[tuple[float, float]], t: float) -> str:
    return ", ".join(f"{a:.2f}-{b:.2f}" for a, b in faults if a - 10 <= t <= b + 10) or "none near"


def check(h: History, settle_s: float) -> tuple[dict[str, int], list[str]]:
    """Verdict counts and a few examples of each violation."""
    examples: list[str] = []
    per_kind: dict[str, int] = defaultdict(int)

    def example(text: str) -> None:
        kind = text.split(":", 1)[0]
        per_kind[kind] += 1
        if per_kind[kind] <= 5:
            examples.append(text)

    positions: dict[str, set[tuple[str, int]]] = defaultdict(set)
    for d in h.deliveries:
        positions[d.payload].add((d.partition, d.offset))
    for s in h.stored:
        positions[s.payload].add((s.partition, s.offset))
    delivered_to: dict[str, set[str]] = defaultdict(set)
    for d in h.deliveries:
        delivered_to[d.payload].add(d.group)

    acked = [s for s in h.sent if s.acked]
    lost = undelivered = 0
    for s in acked:
        pid = payload_id(s.producer, s.n)
        if not positions.get(pid):
            lost += 1
            example(f"lost: {pid} (acknowledged, never stored or delivered)")
        elif s.group not in delivered_to.get(pid, set()):
            undelivered += 1
            example(f"undelivered: {pid} stored at {sorted(positions[pid])} but never delivered to {s.group}")

    dup_stored = 0
    for pid, where in positions.items():
        if len(where) > 1:
            dup_stored += 1
            example(f"stored twice: {pid} at {sorted(where)}")

    order_violations = 0
    by_producer: dict[str, list[tuple[int, tuple[str, int]]]] = defaultdict(list)
    for s in h.sent:
        where = positions.get(payload_id(s.producer, s.n))
        if s.fixed and where:
            by_producer[s.producer].append((s.n, min(where)))
    for producer, stored in by_producer.items():
        stored.sort()
        for (n0, (p0, o0)), (n1, (p1, o1)) in itertools.pairwise(stored):
            if p1 != p0 or o1 <= o0:
                order_violations += 1
                example(f"order: {producer}:{n1} at {p1}:{o1} after {producer}:{n0} at {p0}:{o0}")

    acked_redelivered = acked_near_fault = unconfirmed_redelivered = unflagged = redeliveries = 0
    history: dict[tuple[str, str, int], list[Delivery]] = defaultdict(list)
    for d in h.deliveries:
        history[(d.group, d.partition, d.offset)].append(d)
    for (group, partition, offset), ds in history.items():
        ds.sort(key=lambda d: d.received_at)
        for i, d in enumerate(ds[1:], 1):
            redeliveries += 1
            if not d.redelivered:
                unflagged += 1
                first = ds[0]
                ack = "never acked" if first.acked_at is None else f"acked at {first.acked_at:.2f}"
                example(
                    f"unflagged redelivery: {group} {partition}:{offset} ({d.payload}) delivery #{i + 1}"
                    f" at {d.received_at:.2f}; first at {first.received_at:.2f}, {ack};"
                    f" faults {_near(h.faults, first.received_at)}"
                )
            acks = [e.acked_at for e in ds[:i] if e.acked_at is not None and e.acked_at < d.received_at]
            earlier_ack = [t for t in acks if settled(t, h.faults, settle_s)]
            if acks and not earlier_ack:
                acked_near_fault += 1
            sent = [e.ack_sent_at for e in ds[:i] if e.acked_at is None and e.ack_sent_at is not None]
            if not acks and any(t < d.received_at for t in sent):
                unconfirmed_redelivered += 1
            if earlier_ack:
                acked_redelivered += 1
                example(
                    f"acknowledged then delivered again: {group} {partition}:{offset} ({d.payload}),"
                    f" ack {d.received_at - max(earlier_ack):.2f}s before the repeat"
                )

    ok_large: set[str] = set()
    large_corrupt = 0
    for r in h.large_receipts:
        expected = h.large_sent.get(r.payload)
        if expected is None:
            continue  # sent but refused or not acknowledged: any complete copy is checked below
        if (r.sha256, r.size) == expected:
            ok_large.add(r.payload)
        else:
            large_corrupt += 1
            example(f"large corrupt: {r.payload} got {r.size} bytes sha {r.sha256[:12]}, sent {expected[1]}")
    large_lost = len(set(h.large_sent) - ok_large)
    for pid in sorted(set(h.large_sent) - ok_large)[:3]:
        example(f"large lost: {pid} never received whole")

    verdict = {
        "sent": len(h.sent),
        "acked": len(acked),
        "delivered": len(h.deliveries),
        "redeliveries": redeliveries,
        "faults": len(h.faults),
        "lost": lost,
        "undelivered": undelivered,
        "dup_stored": dup_stored,
        "order_violations": order_violations,
        "acked_redelivered": acked_redelivered,
        "acked_redelivered_near_fault": acked_near_fault,  # information: the ACK may have been lost
        "ack_unconfirmed_redelivered": unconfirmed_redelivered,  # information: the broker refused the ACK
        "unflagged_redeliveries": unflagged,
        "large_sent": len(h.large_sent),
        "large_refused": h.large_refused,
        "large_ok": len(ok_large),
        "large_partial": h.large_partial,
        "large_stalled": h.large_stalled,
        "stuck_tasks": h.stuck_tasks,
        "read_errors": len(h.read_errors),
        "large_corrupt": large_corrupt,
        "large_lost": large_lost,
    }
    return verdict, examples


MUST_BE_ZERO = (
    "lost",
    "undelivered",
    "dup_stored",
    "order_violations",
    "acked_redelivered",
    "unflagged_redeliveries",
    "large_corrupt",
    "large_lost",
    "stuck_tasks",  # producers or consumers that hung after they were told to stop
    "read_errors",  # a CM that could not read every partition by offset after the run
)


def summary_line(verdict: dict[str, int | str]) -> str:
    return " ".join(f"{k}={v}" for k, v in verdict.items())
