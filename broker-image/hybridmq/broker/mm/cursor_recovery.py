"""A new primary reads its partition's log back: the queues' and durable subscriptions' cursors
and delivery counts, the named readers' cursors, the open transactions, the moves to ``_DMQ``.

Cursors and delivery counts are control records in the log itself (``CursorCommit`` + ``AckRanges``,
``DeliveredThrough``, ``Redelivery``), so they replicate with the data and the latest of each wins.
"""

from __future__ import annotations

from typing import Any

from hybridmq.api.frames import DMQ_DESTINATION, BatchFlag, is_reserved
from hybridmq.broker.destinations.batch_payload import StoredBatch
from hybridmq.broker.destinations.delivery import DeliveryState
from hybridmq.broker.destinations.matching import make_matcher
from hybridmq.broker.log.control import (
    AckRanges,
    CursorCommit,
    DeliveredThrough,
    ReaderCursor,
    Redelivery,
    TxDecision,
    TxEnd,
    TxPrepare,
    decode_control,
)
from hybridmq.broker.mm.delivery_engine import DeliveryEngine
from hybridmq.broker.mm.storage import PartitionStorage
from hybridmq.broker.transactions.participant import TxParticipant


def recover_cursors(
    name: str,
    storage: PartitionStorage,
    delivery: DeliveryEngine,
    tx: TxParticipant,
    readers: dict[str, int],
) -> int:
    """Read the log of partition ``name`` back into ``delivery`` (its queues' and durable
    subscriptions' states), ``tx`` and ``readers``; the end of the last application data batch.
    Everything in the log becomes visible: this primary's log is the partition's now."""
    data_end = 0
    snaps: dict[str, list[Any]] = {}  # key -> [lw, ack ranges, delivered through, {offset: count}]
    moved: list[tuple[str, int, int]] = []  # (state key, first, last) moved from here to _DMQ
    for batch in storage.scan(0):
        if batch.control:
            storage.note_control(batch.base, batch.n)
            for rec in decode_control(batch.blob):
                if isinstance(rec, CursorCommit):
                    snaps.setdefault(rec.subscription, [0, (), 0, {}])[0] = rec.offset
                elif isinstance(rec, AckRanges):
                    snaps.setdefault(rec.subscription, [0, (), 0, {}])[1] = rec.ranges
                elif isinstance(rec, DeliveredThrough):
                    snap = snaps.setdefault(rec.subscription, [0, (), 0, {}])
                    snap[2] = max(snap[2], rec.offset)
                elif isinstance(rec, Redelivery):
                    counts = snaps.setdefault(rec.subscription, [0, (), 0, {}])[3]
                    for offset in range(rec.offset, rec.offset + rec.count):
                        counts[offset] = max(counts.get(offset, 0), rec.attempt)
                elif isinstance(rec, ReaderCursor):
                    readers[rec.reader] = rec.offset
                elif isinstance(rec, TxPrepare | TxDecision | TxEnd):
                    tx.observe(rec, batch.base)
            continue
        tx.observe_data(batch.extra)
        origin = _moved_from(name, batch)
        if origin is not None:
            moved.append(origin)
        if not is_reserved(batch.dest):
            data_end = batch.next_offset
        if batch.dest.startswith("queue:") and ("q:" + batch.dest) not in delivery.states:
            delivery.queue_state(batch.dest, batch.base)
    for key, (lw, ranges, through, counts) in snaps.items():
        state = delivery.states.get(key)
        if state is None:
            if key.startswith("q:"):
                state = delivery.queue_state(key[2:], 0)
            elif key.startswith("d:"):
                _, _, pattern = key[2:].partition("|")
                mode, _, pat = pattern.partition("|")
                state = DeliveryState(key, make_matcher(pat, mode), 0, False, True)
                delivery.states[key] = state
            else:
                continue
        state.restore(lw, ranges, through, counts.items())
    # A move to _DMQ is its own batch, the acknowledgement at its origin a later cursor record:
    # a primary lost between the two left records that are in _DMQ yet unacknowledged, which
    # this one would move (or deliver) once more. The move itself says what it settled.
    for key, first, last in moved:
        state = delivery.states.get(key)
        if state is None and key.startswith("q:"):
            state = delivery.queue_state(key[2:], 0)
        if state is not None:
            state.mark_acked(first, last)
    tx.recovered()
    storage.visible_end = storage.end_offset
    return data_end


def _moved_from(name: str, batch: StoredBatch) -> tuple[str, int, int] | None:
    """``(state key, first, last)`` of the records a ``_DMQ`` batch of this log moved here
    (``_to_dmq``), or None for any other batch."""
    if not batch.flags & BatchFlag.DMQ or batch.dest != DMQ_DESTINATION or not batch.extra:
        return None
    partition, _, first = str(batch.extra.get("from") or "").rpartition(":")
    orig = str(batch.extra.get("orig") or "")
    if partition != name or not first.isdigit():
        return None
    key = str(batch.extra.get("sub") or ("q:" + orig if orig.startswith("queue:") else ""))
    return (key, int(first), int(first) + batch.n - 1) if key else None
