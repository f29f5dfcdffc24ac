"""Produces held for a partition (an MM's coming promotion, a CM's missing primary): bounded, in
order, refused with the holder's code, and refused by epoch."""

from __future__ import annotations

import asyncio

from hybridmq.api.frames import ErrorCode
from hybridmq.api.requests import Produce
from hybridmq.broker.routing.held_requests import HeldRequests


class FakeConn:
    def __init__(self) -> None:
        self.closed = False
        self.errors: list[tuple[int, ErrorCode]] = []

    def reply_error(self, frame: Produce, code: ErrorCode, msg: str) -> None:
        self.errors.append((frame.c, code))


def frame(c: int, epoch: int, records: bytes = b"") -> Produce:
    return Produce(c=c, partition="p0", destination="queue:q", count=1, records=records, epoch=epoch)


async def test_held_requests_are_served_in_arrival_order_once() -> None:
    waits, conn, served = HeldRequests(ErrorCode.NOT_PRIMARY), FakeConn(), []
    for c in range(3):
        assert waits.hold("p0", conn, frame(c, 4))  # type: ignore[arg-type]
    assert len(waits) == 3
    assert waits.release("p0", lambda _conn, f: served.append(f.c)) == 3
    assert waits.release("p0", lambda _conn, f: served.append(f.c)) == 0
    assert served == [0, 1, 2] and len(waits) == 0 and conn.errors == []


async def test_the_hold_is_bounded_and_a_closed_connection_gets_nothing() -> None:
    waits, conn, gone = HeldRequests(ErrorCode.NOT_PRIMARY, max_held=2), FakeConn(), FakeConn()
    assert waits.hold("p0", conn, frame(1, 4))  # type: ignore[arg-type]
    assert waits.hold("p1", gone, frame(2, 4))  # type: ignore[arg-type]
    assert not waits.hold("p0", conn, frame(3, 4))  # type: ignore[arg-type]
    gone.closed = True
    waits.refuse_all("stopping")
    assert conn.errors == [(1, ErrorCode.NOT_PRIMARY)] and gone.errors == [] and len(waits) == 0


async def test_the_hold_is_bounded_in_bytes_too() -> None:
    waits, conn = HeldRequests(ErrorCode.NOT_PRIMARY, max_bytes=100), FakeConn()
    assert waits.hold("p0", conn, frame(1, 4, b"x" * 60))  # type: ignore[arg-type]
    assert not waits.hold("p0", conn, frame(2, 4, b"x" * 60))  # type: ignore[arg-type]
    waits.release("p0", lambda _conn, f: None)
    assert waits.hold("p0", conn, frame(3, 4, b"x" * 60))  # type: ignore[arg-type]


async def test_a_table_at_one_epoch_refuses_only_what_was_routed_at_it_or_before() -> None:
    waits, conn = HeldRequests(ErrorCode.NOT_PRIMARY), FakeConn()
    for c, epoch in ((1, 3), (2, 4), (3, 5)):
        waits.hold("p0", conn, frame(c, epoch))  # type: ignore[arg-type]
    assert waits.refuse("p0", "another primary at 4", through_epoch=4) == 2
    assert conn.errors == [(1, ErrorCode.NOT_PRIMARY), (2, ErrorCode.NOT_PRIMARY)]
    served: list[int] = []
    assert waits.release("p0", lambda _conn, f: served.append(f.c)) == 1
    assert served == [3]


async def test_what_waits_too_long_is_refused() -> None:
    waits, conn = HeldRequests(ErrorCode.NOT_PRIMARY, max_wait_s=0.05), FakeConn()
    waits.hold("p0", conn, frame(1, 4))  # type: ignore[arg-type]
    await asyncio.sleep(0.2)
    assert conn.errors == [(1, ErrorCode.NOT_PRIMARY)] and len(waits) == 0


async def test_a_cm_refuses_with_its_own_code() -> None:
    waits, conn = HeldRequests(ErrorCode.MM_UNAVAILABLE, max_wait_s=0.05), FakeConn()
    assert waits.hold("p0", conn, frame(1, 4))  # type: ignore[arg-type]
    assert waits.partitions() == ["p0"]
    await asyncio.sleep(0.2)
    assert conn.errors == [(1, ErrorCode.MM_UNAVAILABLE)] and waits.partitions() == []
