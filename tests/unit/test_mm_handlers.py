"""The MM's request handlers (reader commits, transaction frames, fetch routing) and the lookups
they share (``HostedPartitions``, ``Subscriptions``), against a fake MM context: which requests
reach a partition, which are refused and with what. No server, no sockets."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from functools import partial
from typing import Any, cast

import pytest
from host_wire import decoded

from hybridmq.api.frames import ErrorCode, FrameType
from hybridmq.broker.destinations.delivery import ConsumerLink
from hybridmq.broker.dispatch import Dispatcher, Entry, Mode
from hybridmq.broker.log.control import ControlRecord, ReaderCursor
from hybridmq.broker.mm import fetch_handler, reader_commit
from hybridmq.broker.mm.commit_error import CommitError
from hybridmq.broker.mm.context import MMContext
from hybridmq.broker.mm.hosted import HostedPartitions, NotPrimaryHere, Subscriptions
from hybridmq.broker.mm.partition import PartitionHost
from hybridmq.broker.transactions import mm_handler
from hybridmq.protocol.connection import correlation


@dataclass
class FakeStorage:
    start_offset: int = 0
    end_offset: int = 50


@dataclass
class FakeTx:
    doubtful: list[dict[str, Any]] = field(default_factory=list)
    prepared: list[dict[str, Any]] = field(default_factory=list)

    def in_doubt(self, age: float) -> list[dict[str, Any]]:
        return list(self.doubtful)

    async def prepare(self, frame: dict[str, Any], links: dict[str, ConsumerLink]) -> None:
        self.prepared.append({"x": frame["x"], "links": sorted(links)})


@dataclass
class FakeHost:
    name: str
    epoch: int = 4
    serving: bool = True
    storage: FakeStorage = field(default_factory=FakeStorage)
    refuse_commit: ErrorCode | None = None
    appended: list[ControlRecord] = field(default_factory=list)
    readers: dict[str, int] = field(default_factory=dict)
    tx: FakeTx = field(default_factory=FakeTx)

    def append_control(self, records: list[ControlRecord]) -> None:
        self.appended.extend(records)

    async def commit_control(self, end: int) -> None:
        if self.refuse_commit is not None:
            raise CommitError(self.refuse_commit, "lease lapsed")


@dataclass
class FakeConn:
    closed: bool = False
    sent: list[dict[str, Any]] = field(default_factory=list)

    def send_nowait(self, frame: dict[str, Any]) -> None:
        self.sent.append(frame)

    def reply(self, frame: Any, answer: dict[str, Any]) -> None:
        self.sent.append(dict(answer, r=correlation(frame)))

    def reply_error(self, frame: Any, code: ErrorCode, msg: str) -> None:
        self.sent.append({"t": FrameType.ERROR, "r": correlation(frame), "code": int(code), "msg": msg})


@dataclass
class FakeMM:
    name: str = "mm-0"
    hosted: HostedPartitions = field(default_factory=lambda: HostedPartitions("mm-0"))
    subscriptions: Subscriptions = field(default_factory=Subscriptions)
    woken: int = 0

    def host(self, name: str, **kw: Any) -> FakeHost:
        host = FakeHost(name, **kw)
        self.hosted.add(cast(PartitionHost, host))
        return host

    def wake(self) -> None:
        self.woken += 1


def ctx(mm: FakeMM) -> MMContext:
    return cast(MMContext, mm)


def code_of(reply: dict[str, Any]) -> ErrorCode | None:
    return ErrorCode(reply["code"]) if reply.get("t") == FrameType.ERROR else None


# -- the lookups ----------------------------------------------------------------------------------


def test_primary_answers_only_for_a_serving_host_at_a_known_epoch() -> None:
    mm = FakeMM()
    host = mm.host("p0", epoch=4)
    assert mm.hosted.primary("p0") is host
    assert mm.hosted.primary("p0", 4) is host
    assert mm.hosted.primary("p0", 3) is host  # an older routing epoch is the handler's business
    with pytest.raises(NotPrimaryHere, match="epoch 5 > 4"):
        mm.hosted.primary("p0", 5)
    with pytest.raises(NotPrimaryHere, match="not primary of p9"):
        mm.hosted.primary("p9")
    host.serving = False
    with pytest.raises(NotPrimaryHere):
        mm.hosted.primary("p0")


def test_a_demoted_host_does_not_remove_its_successor() -> None:
    mm = FakeMM()
    old = cast(PartitionHost, FakeHost("p0", epoch=4))
    mm.hosted.add(old)
    new = mm.host("p0", epoch=5)
    assert not mm.hosted.remove(old)  # the old one stops late: the new one stays
    assert mm.hosted.get("p0") is new
    assert mm.hosted.remove(cast(PartitionHost, new)) and "p0" not in mm.hosted


def test_a_closed_connection_drops_its_own_subscriptions_only() -> None:
    subs = Subscriptions()
    a, b = FakeConn(), FakeConn()
    la, la2, lb = (cast(ConsumerLink, object()) for _ in range(3))
    assert subs.put(a, "s1", la) is None
    assert subs.put(a, "s1", la2) is la  # the same subscription again replaces its link
    subs.put(b, "s1", lb)
    assert subs.of(a) == {"s1": la2}
    assert subs.drop(a) == [la2]
    assert subs.get(a, "s1") is None and subs.get(b, "s1") is lb and len(subs) == 1


# -- READER_COMMIT ----------------------------------------------------------------------------------


def commit(mm: FakeMM, **frame: Any) -> dict[str, Any]:
    """A READER_COMMIT from a CM, as the MM's connection decodes and dispatches it."""
    conn = FakeConn()
    entry = Entry(partial(reader_commit.handle, ctx(mm)), Mode.SPAWNED)
    dispatch = Dispatcher({FrameType.READER_COMMIT: entry}, lambda c: c)

    async def go() -> None:
        dispatch(conn, decoded({"t": FrameType.READER_COMMIT, "c": 9, **frame}))
        await asyncio.gather(*dispatch.tasks)

    asyncio.run(go())
    assert len(conn.sent) == 1
    return conn.sent[0]


def test_a_reader_commit_is_stored_and_remembered_once_committed() -> None:
    mm = FakeMM()
    host = mm.host("p0")
    reply = commit(mm, p="p0", pe=4, rn="spark", o=20)
    assert reply == {"t": FrameType.OK, "r": 9, "p": "p0", "rn": "spark", "o": 20}
    assert host.appended == [ReaderCursor("spark", 20)] and host.readers == {"spark": 20}


def test_a_reader_commit_that_cannot_be_committed_is_not_remembered() -> None:
    mm = FakeMM()
    host = mm.host("p0", refuse_commit=ErrorCode.NOT_PRIMARY)
    reply = commit(mm, p="p0", rn="spark", o=20)
    assert code_of(reply) == ErrorCode.NOT_PRIMARY and "not committed" in reply["msg"]
    assert host.readers == {}


def test_reader_commits_are_refused_with_the_reason() -> None:
    mm = FakeMM()
    host = mm.host("p0", epoch=4)
    assert code_of(commit(mm, p="p0", rn="spark", o=51)) == ErrorCode.OFFSET_OUT_OF_RANGE  # past the end
    assert code_of(commit(mm, p="p0", pe=5, rn="spark", o=1)) == ErrorCode.NOT_PRIMARY  # newer epoch
    assert code_of(commit(mm, p="p7", rn="spark", o=1)) == ErrorCode.NOT_PRIMARY  # not hosted
    for bad, field_ in (
        ({"p": "p0", "rn": "", "o": 1}, "$.rn"),
        ({"p": "p0", "rn": "r" * 257, "o": 1}, "$.rn"),
        ({"p": "p0", "rn": "r", "o": -1}, "$.o"),
        ({"p": "p0", "rn": "r", "o": True}, "$.o"),
        ({"p": "", "rn": "r", "o": 1}, "$.p"),
        ({"rn": "r", "o": 1}, "`p`"),
    ):
        reply = commit(mm, **bad)
        assert code_of(reply) == ErrorCode.INVALID_REQUEST and field_ in reply["msg"], reply
    assert host.appended == [] and host.readers == {}


# -- transaction frames -----------------------------------------------------------------------------


def tx(mm: FakeMM, conn: FakeConn, **frame: Any) -> dict[str, Any]:
    asyncio.run(mm_handler.handle(ctx(mm), cast(Any, conn), {"c": 3, **frame}))
    return conn.sent[-1]


def test_a_prepare_gets_the_links_of_its_own_connection() -> None:
    mm = FakeMM()
    host = mm.host("p0")
    conn, other = FakeConn(), FakeConn()
    mm.subscriptions.put(conn, "s1", cast(ConsumerLink, object()))
    mm.subscriptions.put(other, "s2", cast(ConsumerLink, object()))
    assert tx(mm, conn, t=FrameType.TX_PREPARE, p="p0", x="t1")["t"] == FrameType.OK
    assert host.tx.prepared == [{"x": "t1", "links": ["s1"]}] and mm.woken == 1


def test_transaction_frames_are_refused_with_the_reason() -> None:
    mm = FakeMM()
    mm.host("p0")
    conn = FakeConn()
    assert code_of(tx(mm, conn, t=FrameType.TX_END, p="p9", x="t1", commit=True)) == ErrorCode.NOT_PRIMARY
    assert code_of(tx(mm, conn, t=FrameType.TX_END, p="p0", commit=True)) == ErrorCode.INVALID_REQUEST  # no x
    assert mm.woken == 0


def test_in_doubt_transactions_are_gathered_from_every_hosted_partition() -> None:
    mm = FakeMM()
    mm.host("p0", tx=FakeTx(doubtful=[{"x": "a"}]))
    mm.host("p1", tx=FakeTx(doubtful=[{"x": "b"}, {"x": "c"}]))
    reply = tx(mm, FakeConn(), t=FrameType.TX_INDOUBT, age=1.0)
    assert sorted(t["x"] for t in reply["txs"]) == ["a", "b", "c"]


# -- FETCH routing ------------------------------------------------------------------------------------


def test_a_fetch_routed_with_a_newer_epoch_or_to_another_mm_is_not_primary() -> None:
    mm = FakeMM()
    mm.host("p0", epoch=4)
    for frame in ({"p": "p0", "pe": 5, "o": 0}, {"p": "p3", "o": 0}):
        reply = fetch_handler.fetch(ctx(mm), decoded({"t": FrameType.FETCH, "c": 1, **frame}))
        assert code_of(reply) == ErrorCode.NOT_PRIMARY and reply["r"] == 1
