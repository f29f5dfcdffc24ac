"""Control records: broker state that lives in the partition log next to the data.

Consumer cursors and acknowledgements, named reader cursors, producer sequence state and markers are
appended as *control batches* (``append(..., control=True)``) so that they replicate with the data
and a new primary finds them after a failover. The log does not interpret them; higher layers (the MM's
destinations) do, with these types.

A control batch's payload is a msgpack array of records, each ``[type code, field, ...]``; its
``record_count`` is the number of records. Unknown type codes decode as :class:`UnknownControl`, so
an older broker can read a newer log.

Usage::

    payload, count = encode_control([CursorCommit("orders/sub-a", 1042)])
    log.append(payload, count, epoch, control=True)
    ...
    for header, payload in log.iter_batches(start):
        if header.is_control:
            for record in decode_control(payload):
                ...
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

import msgpack

from .errors import CorruptBatchError


@dataclass(frozen=True, slots=True)
class ControlRecord:
    TYPE: ClassVar[int] = -1

    def to_wire(self) -> list[Any]:
        return [self.TYPE, *(getattr(self, f.name) for f in fields(self))]

    @classmethod
    def from_wire(cls, values: list[Any]) -> ControlRecord:
        return cls(*values)


@dataclass(frozen=True, slots=True)
class CursorCommit(ControlRecord):
    """A subscription's committed position: every record below ``offset`` is acknowledged."""

    TYPE: ClassVar[int] = 1
    subscription: str
    offset: int


@dataclass(frozen=True, slots=True)
class AckRanges(ControlRecord):
    """Individual acknowledgements above the cursor (queues ack out of order): ``[first, last]``."""

    TYPE: ClassVar[int] = 2
    subscription: str
    ranges: tuple[tuple[int, int], ...]

    @classmethod
    def from_wire(cls, values: list[Any]) -> ControlRecord:
        subscription, ranges = values
        return cls(subscription, tuple((int(a), int(b)) for a, b in ranges))


@dataclass(frozen=True, slots=True)
class Redelivery(ControlRecord):
    """``count`` records from ``offset`` were handed out again (``attempt``); past the maximum a
    record goes to ``_DMQ``. ``count`` 1 is left off the wire (the record as it was before)."""

    TYPE: ClassVar[int] = 3
    subscription: str
    offset: int
    attempt: int
    count: int = 1

    def to_wire(self) -> list[Any]:
        wire = [self.TYPE, self.subscription, self.offset, self.attempt]
        return wire if self.count == 1 else [*wire, self.count]


@dataclass(frozen=True, slots=True)
class ProducerSequence(ControlRecord):
    """Explicit producer state (e.g. carried over when producers move between partitions)."""

    TYPE: ClassVar[int] = 4
    producer_id: int
    producer_epoch: int
    last_sequence: int


@dataclass(frozen=True, slots=True)
class Marker(ControlRecord):
    """A marker (affinity takeover protocol, drain/seal points, ...): ``kind`` plus free data."""

    TYPE: ClassVar[int] = 5
    kind: str
    marker_id: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SubscriptionState(ControlRecord):
    """A subscription was created (``active``) or deleted on this partition."""

    TYPE: ClassVar[int] = 6
    subscription: str
    active: bool
    durable: bool = True


@dataclass(frozen=True, slots=True)
class DeliveredThrough(ControlRecord):
    """Every batch of a subscription below ``offset`` has been handed out at least once.

    Written (and committed) *before* the deliveries it covers are sent, like :class:`Redelivery`
    for second and later attempts, so a new primary knows which unacknowledged batches it delivers
    again (and their delivery count) after a failover."""

    TYPE: ClassVar[int] = 7
    subscription: str
    offset: int


@dataclass(frozen=True, slots=True)
class ReaderCursor(ControlRecord):
    """A named reader's committed position (a stream reader, like a Kafka consumer group's
    committed offset): it has processed every record below ``offset``."""

    TYPE: ClassVar[int] = 8
    reader: str
    offset: int


@dataclass(frozen=True, slots=True)
class TxPrepare(ControlRecord):
    """A transaction is prepared here: the batches it produces (``[dest, count, blob, flags,
    expiry]``, appended as data only when it commits: read-committed) and the consumed records
    it holds (``[state key, delivery start, first, last]``, acknowledged when it commits, given
    back when it rolls back). ``coordinator`` holds the decision of ``participants``."""

    TYPE: ClassVar[int] = 9
    txid: str
    coordinator: str
    participants: tuple[str, ...]
    batches: tuple[Any, ...]
    holds: tuple[Any, ...]
    prepared_ms: int = 0


@dataclass(frozen=True, slots=True)
class TxDecision(ControlRecord):
    """The coordinator record: the transaction's outcome, written once (the first one wins)."""

    TYPE: ClassVar[int] = 10
    txid: str
    commit: bool


@dataclass(frozen=True, slots=True)
class TxEnd(ControlRecord):
    """The transaction's outcome took effect in this partition (after its data, when committed)."""

    TYPE: ClassVar[int] = 11
    txid: str
    commit: bool


@dataclass(frozen=True, slots=True)
class UnknownControl(ControlRecord):
    """A record of a type this version does not know; kept so it can be skipped or forwarded."""

    type_code: int
    values: tuple[Any, ...]

    def to_wire(self) -> list[Any]:
        return [self.type_code, *self.values]


CONTROL_TYPES: dict[int, type[ControlRecord]] = {
    cls.TYPE: cls
    for cls in (
        CursorCommit,
        AckRanges,
        Redelivery,
        ProducerSequence,
        Marker,
        SubscriptionState,
        DeliveredThrough,
        ReaderCursor,
        TxPrepare,
        TxDecision,
        TxEnd,
    )
}


def encode_control(records: Sequence[ControlRecord]) -> tuple[bytes, int]:
    """``(payload, record_count)`` for a control batch holding ``records``."""
    if not records:
        raise ValueError("a control batch holds at least one record")
    return msgpack.packb([r.to_wire() for r in records]), len(records)


def decode_control(payload: bytes | bytearray | memoryview) -> list[ControlRecord]:
    """The records of a control batch's payload."""
    try:
        items: Any = msgpack.unpackb(payload)
    except (ValueError, msgpack.UnpackException) as exc:
        raise CorruptBatchError(f"undecodable control payload: {exc}") from exc
    if not isinstance(items, list):
        raise CorruptBatchError("control payload is not an array")
    records: list[ControlRecord] = []
    for item in items:
        if not isinstance(item, list) or not item or not isinstance(item[0], int):
            raise CorruptBatchError("malformed control record")
        cls = CONTROL_TYPES.get(item[0])
        if cls is None:
            records.append(UnknownControl(item[0], tuple(item[1:])))
            continue
        try:
            records.append(cls.from_wire(item[1:]))
        except (TypeError, ValueError) as exc:
            raise CorruptBatchError(f"malformed control record of type {item[0]}: {exc}") from exc
    return records
