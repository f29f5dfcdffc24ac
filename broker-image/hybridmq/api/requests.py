"""Typed request frames: the data path's requests as msgspec Structs, decoded and validated in one
step at the connection they arrive on (``hybridmq.protocol.codec.FrameDecoder``).

Each Struct is one frame type, tagged by the wire's ``t``; its fields have names that say what they
are, each bound to the short wire key (``hybridmq.api.frames`` documents the keys). A key keeps
its meaning within a frame type, and in code one name means one thing: a PRODUCE's ``e`` is
``Produce.epoch``, a FETCH's ``e`` is ``Fetch.end``, never the same attribute. The wire itself
is unchanged (a broker of this version and one of the version before understand each other during
a roll): ``e`` is a partition epoch in PRODUCE, ACK and NACK and an end offset in FETCH. Fields a
sender leaves at their defaults are not sent (``omit_defaults``).

The same Struct serves both hops: a client's PRODUCE to a CM and the CM's PRODUCE to the MM (the
CM stamps ``epoch``); a client's ACK names its own subscription id (an int), the CM's the CM-wide
key (a str). A frame whose fields are missing or of the wrong type is not handed to any handler:
the server answers ``INVALID_REQUEST`` naming the field (``"Expected `int`, got `str` - at `$.n`"``).
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

import msgspec

from hybridmq.api.frames import FrameType

MAX_READER_NAME = 256
MAX_TXID = 64  # characters of a transaction id
MAX_TX_BATCHES = 1_000  # record batches one transaction produces


class Request(msgspec.Struct, tag_field="t", omit_defaults=True, kw_only=True):
    """A typed request. ``c``: the correlation id the answer carries (none: no answer wanted)."""

    TYPE: ClassVar[FrameType]
    c: int | None = None


class Produce(Request, tag=int(FrameType.PRODUCE)):
    """A batch of records for one partition: client -> CM, and CM -> the partition's primary MM."""

    TYPE: ClassVar[FrameType] = FrameType.PRODUCE
    partition: str = msgspec.field(name="p")
    destination: str = msgspec.field(name="d")
    count: int = msgspec.field(name="n")
    records: bytes = msgspec.field(name="b")  # the producer's opaque blob of ``count`` records
    flags: int = msgspec.field(name="f", default=0)  # ``BatchFlag``
    # ms since the epoch, 0 = never (a float is taken, as brokers before typed requests took it)
    expiry: int | float = msgspec.field(name="x", default=0)
    extra: dict[str, Any] | None = msgspec.field(name="xa", default=None)  # chunk info, DMQ origin
    pid: int | None = None  # idempotence: producer id, producer epoch, base sequence
    producer_epoch: int = msgspec.field(name="pep", default=0)
    sequence: int = msgspec.field(name="seq", default=-1)
    epoch: int | None = msgspec.field(name="e", default=None)  # the partition's, stamped by the CM


class Ack(Request, tag=int(FrameType.ACK)):
    """Records of one delivery acknowledged: client -> CM -> the MM that delivered them."""

    TYPE: ClassVar[FrameType] = FrameType.ACK
    subscription: int | str = msgspec.field(name="s")  # the client's id; the CM-wide key to an MM
    offset: int = msgspec.field(name="o")  # the delivery's first offset: which delivery
    partition: str = msgspec.field(name="p", default="")
    records: tuple[int, int] | None = msgspec.field(name="a", default=None)  # [first, last]; None: all
    attempt: int | None = msgspec.field(name="rd", default=None)  # the delivery's ``rd``
    epoch: int | None = msgspec.field(name="e", default=None)  # the partition epoch it came at


class Nack(Ack, tag=int(FrameType.NACK)):
    """Records of one delivery given back (``requeue``) or rejected to ``queue:_DMQ``."""

    TYPE: ClassVar[FrameType] = FrameType.NACK
    requeue: bool = msgspec.field(name="rq", default=True)


class Fetch(Request, tag=int(FrameType.FETCH)):
    """A partition's log read by offset: client -> CM -> the partition's primary MM."""

    TYPE: ClassVar[FrameType] = FrameType.FETCH
    partition: str = msgspec.field(name="p")
    offset: int = msgspec.field(name="o")
    end: int | None = msgspec.field(name="e", default=None)  # exclusive; capped at the high watermark
    max_bytes: int | None = msgspec.field(name="mb", default=None)
    internal: bool = msgspec.field(name="i", default=False)  # the ``_`` destinations too (client -> CM)
    partition_epoch: int | None = msgspec.field(name="pe", default=None)  # stamped by the CM


class ReaderCommit(Request, tag=int(FrameType.READER_COMMIT)):
    """How far a named reader (a stream reading by offset) has processed a partition: client -> CM
    -> the partition's primary MM, stored as a control record in its log."""

    TYPE: ClassVar[FrameType] = FrameType.READER_COMMIT
    partition: Annotated[str, msgspec.Meta(min_length=1)] = msgspec.field(name="p")
    reader: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_READER_NAME)] = msgspec.field(name="rn")
    offset: Annotated[int, msgspec.Meta(ge=0)] = msgspec.field(name="o")  # the next one it reads
    partition_epoch: int | None = msgspec.field(name="pe", default=None)  # stamped by the CM


TxId = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_TXID)]
# A batch a transaction produces: partition, destination, record count, records blob, flags, expiry.
TxBatch = tuple[
    str, Annotated[str, msgspec.Meta(min_length=1)], Annotated[int, msgspec.Meta(ge=1)], bytes, int, int
]
# A queue message a transaction consumed: the consumer's CM-wide subscription key, partition, the
# delivery's first offset, the message's offset, its delivery count - 1.
TxConsumed = tuple[str, str, int, int, int]


class TxCommit(Request, tag=int(FrameType.TX_COMMIT)):
    """A transacted session's commit: client -> its CM, the transaction manager."""

    TYPE: ClassVar[FrameType] = FrameType.TX_COMMIT
    transaction: TxId = msgspec.field(name="x")
    batches: Annotated[list[TxBatch], msgspec.Meta(max_length=MAX_TX_BATCHES)] = msgspec.field(
        name="b", default_factory=list
    )
    consumed: list[TxConsumed] = msgspec.field(name="k", default_factory=list)


class TxResolve(Request, tag=int(FrameType.TX_RESOLVE)):
    """The outcome of a transaction whose commit was lost with its CM: client -> a CM."""

    TYPE: ClassVar[FrameType] = FrameType.TX_RESOLVE
    transaction: TxId = msgspec.field(name="x")
    participants: Annotated[list[str], msgspec.Meta(min_length=1)] = msgspec.field(name="ps")


# The typed requests a broker's connection decodes (clients' to a CM, CMs' to an MM).
DATA_REQUESTS: tuple[type[Request], ...] = (Produce, Ack, Nack, Fetch, ReaderCommit, TxCommit, TxResolve)
