"""The MM's ACK/NACK handler against a fake MM context: which acknowledgements reach the partition,
which are refused and how the CM is answered. No server, no sockets: each frame is decoded as the
MM's connection decodes it and goes through the MM's own dispatch entries."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any, cast

from host_wire import decoded

from hybridmq.api.frames import ErrorCode, FrameType
from hybridmq.broker.destinations.delivery import ConsumerLink
from hybridmq.broker.dispatch import Dispatcher, Entry
from hybridmq.broker.mm import acks
from hybridmq.broker.mm.context import MMContext
from hybridmq.broker.mm.hosted import HostedPartitions, Subscriptions
from hybridmq.broker.mm.partition import PartitionHost
from hybridmq.protocol.connection import correlation

CONN_ID = 1


@dataclass
class FakeConn:
    replies: list[dict[str, Any]] = field(default_factory=list)
    errors: list[tuple[Any, ErrorCode, str]] = field(default_factory=list)

    def reply(self, frame: Any, answer: dict[str, Any]) -> None:
        self.replies.append(dict(answer, r=correlation(frame)))

    def reply_error(self, frame: Any, code: ErrorCode, msg: str) -> None:
        self.errors.append((correlation(frame), code, msg))


@dataclass
class FakeHost:
    """A partition that holds one outstanding delivery, at ``outstanding``."""

    name: str = "p0"
    epoch: int = 3
    outstanding: int = 10
    calls: list[dict[str, Any]] = field(default_factory=list)

    def ack(
        self,
        link: object,
        start: int,
        nack: bool,
        attempt: int | None,
        reply: object,
        first: int | None,
        last: int | None,
        requeue: bool,
    ) -> bool:
        self.calls.append(
            {"start": start, "nack": nack, "attempt": attempt, "first": first, "last": last, "answer": reply}
        )
        return start == self.outstanding


@dataclass
class FakeMM:
    """The MM context with real lookups (``HostedPartitions``, ``Subscriptions``) over fakes."""

    host: FakeHost = field(default_factory=FakeHost)
    hosted: HostedPartitions = field(default_factory=lambda: HostedPartitions("mm-0"))
    subscriptions: Subscriptions = field(default_factory=Subscriptions)
    woken: int = 0

    def __post_init__(self) -> None:
        self.hosted.add(cast(PartitionHost, self.host))

    def wake(self) -> None:
        self.woken += 1


def handle(mm: FakeMM, conn: FakeConn, **frame: Any) -> None:
    """``frame`` from a CM, as the MM's connection decodes and dispatches it."""
    handler = partial(acks.handle, cast(MMContext, mm))
    dispatch = Dispatcher({FrameType.ACK: Entry(handler), FrameType.NACK: Entry(handler)}, lambda c: c)
    dispatch(conn, decoded(frame))


def subscribed(conn: FakeConn) -> FakeMM:
    mm = FakeMM()
    mm.subscriptions.put(conn, "sub-1", cast(ConsumerLink, object()))
    return mm


def test_an_ack_of_an_outstanding_delivery_settles_it_and_wakes_the_mm() -> None:
    conn = FakeConn()
    mm = subscribed(conn)
    handle(mm, conn, t=FrameType.ACK, s="sub-1", p="p0", o=10, e=3, rd=0, a=[10, 12], c=7)
    call = mm.host.calls[0]
    assert (call["start"], call["first"], call["last"], call["attempt"], call["nack"]) == (
        10,
        10,
        12,
        1,
        False,
    )
    assert call["answer"] is not None  # answered once committed, by the partition
    assert mm.woken == 1 and conn.errors == [] and conn.replies == []


def test_a_requeueing_nack_is_answered_at_once() -> None:
    conn = FakeConn()
    mm = subscribed(conn)
    handle(mm, conn, t=FrameType.NACK, s="sub-1", p="p0", o=10, e=3, c=8)
    assert mm.host.calls[0]["answer"] is None
    assert conn.replies == [{"t": FrameType.OK, "r": 8}]


def test_refusals_say_why() -> None:
    conn = FakeConn()
    mm = subscribed(conn)
    handle(mm, conn, t=FrameType.ACK, s="other", p="p0", o=10, e=3, c=1)  # no such subscription
    handle(mm, conn, t=FrameType.ACK, s="sub-1", p="p9", o=10, e=3, c=2)  # no such partition here
    handle(mm, conn, t=FrameType.ACK, s="sub-1", p="p0", o=10, e=2, c=3)  # delivered at an older epoch
    handle(mm, conn, t=FrameType.ACK, s="sub-1", p="p0", o=11, e=3, c=4)  # not outstanding
    handle(mm, conn, t=FrameType.ACK, s="sub-1", p="p0", o=10, e=3, a=[12, 11], c=5)  # malformed range
    handle(mm, conn, t=FrameType.ACK, s="sub-1", p="p0", o=10, e=3, a="x", c=6)
    handle(mm, conn, t=FrameType.ACK, s="sub-1", p="p0", o=11, e=3)  # no correlation id: no answer
    codes = [(c, code) for c, code, _ in conn.errors]
    assert codes == [
        (1, ErrorCode.STALE_DELIVERY),
        (2, ErrorCode.STALE_DELIVERY),
        (3, ErrorCode.STALE_DELIVERY),
        (4, ErrorCode.STALE_DELIVERY),
        (5, ErrorCode.INVALID_REQUEST),
        (6, ErrorCode.INVALID_REQUEST),
    ]
    assert "epoch 2 < 3" in conn.errors[2][2] and "not outstanding" in conn.errors[3][2]
    assert [c["start"] for c in mm.host.calls] == [11, 11]  # only well-formed, current ones
    assert mm.woken == 0
