"""A CM holds a produce whose partition has no primary it reaches, and forwards it the moment the
table names one: the producer is answered by the new primary without waiting out a retry back-off.
Likewise a produce the primary refused as no longer its own (a handoff): it goes to the primary of
the next epoch once the table names it.

The CM is the real one, in process, with its table in memory; its links to the MMs and the client's
connection are recorders. One answer per request, with the client's correlation id.
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest

from hybridmq.api.assignment import PartitionAssignment, PartitionType
from hybridmq.api.frames import ErrorCode, FrameType, error_frame
from hybridmq.api.requests import Request
from hybridmq.broker.assignment_source import StaticAssignmentSource
from hybridmq.broker.cm.mm_links import MMLink
from hybridmq.broker.cm.server import CMConfig, ConnectionManager
from hybridmq.broker.cm.session import Session
from hybridmq.broker.dispatch import REQUESTS
from hybridmq.protocol import RemoteError
from hybridmq.protocol.codec import encode_body
from hybridmq.protocol.connection import ConnectionClosed, correlation

PARTITION = "f-0"


class Recorder:
    """A connection: what was sent on it, and the requests made on it (each with its future)."""

    def __init__(self) -> None:
        self.closed = False
        self.write_buffer_size = 0
        self.sent: list[dict[str, Any]] = []
        self.answered = asyncio.Event()  # something was sent on it
        self.send_fails = False
        self.requested = asyncio.Event()  # a second request was made on it
        self.requests: list[tuple[dict[str, Any], asyncio.Future[Any]]] = []

    def send_nowait(self, frame: dict[str, Any]) -> None:
        self.sent.append(frame)
        self.answered.set()

    def reply_error(self, request: Any, code: ErrorCode, msg: str) -> None:
        self.send_nowait(error_frame(code, msg, correlation(request)))

    def request_nowait(self, frame: Request) -> asyncio.Future[Any]:
        frame.c = 1000 + len(self.requests)
        if self.send_fails:  # as a Connection whose transport closed before it noticed
            raise ConnectionClosed("closed")
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.requests.append((msgspec.to_builtins(frame), fut))  # as it went on the wire
        if len(self.requests) > 1:
            self.requested.set()
        return fut


def _fixed(primary: str, epoch: int) -> PartitionAssignment:
    return PartitionAssignment(
        name=PARTITION,
        type=PartitionType.FIXED,
        epoch=epoch,
        primary=primary,
        replicas=("mm-1", "mm-2"),
        in_sync=("mm-1", "mm-2"),
    )


def _cm(source: StaticAssignmentSource, up: dict[str, Recorder | None]) -> ConnectionManager:
    cm = ConnectionManager(CMConfig(name="cm-0", cluster_secret="s"), source)
    source.subscribe(cm._on_table)
    for mm, conn in up.items():
        link = MMLink(mm, "127.0.0.1:1", "cm-0", "s", 1 << 20, lambda link, frame: None, _nothing)
        link.conn = conn  # type: ignore[assignment]
        cm.links[mm] = link
    source.update()
    return cm


def _cluster(
    up: tuple[str, ...], down: tuple[str, ...] = ()
) -> tuple[StaticAssignmentSource, Recorder, ConnectionManager, Session, list[Recorder]]:
    """A CM whose table has PARTITION led by mm-1 at epoch 3: its links to ``up`` are recorders, those
    to ``down`` are not connected; a client's session on it. The recorders of ``up``, in order."""
    source = StaticAssignmentSource([_fixed("mm-1", 3)])
    recorders = [Recorder() for _ in up]
    cm = _cm(source, {**dict(zip(up, recorders, strict=True)), **dict.fromkeys(down)})
    client = Recorder()
    return source, client, cm, Session("s-1", "alice", "c-1", client), recorders  # type: ignore[arg-type]


def _produce(corr: int) -> Any:
    """A client's PRODUCE as the CM's connection decodes it; its sequence number is its correlation
    id (told apart when resent)."""
    frame = {"t": FrameType.PRODUCE, "c": corr, "p": PARTITION, "d": "queue:q", "n": 1, "b": b"r"}
    return REQUESTS.decode(encode_body(frame | {"pid": 77, "pep": 0, "seq": corr}))


async def test_a_produce_for_a_lost_primary_goes_to_the_new_one_once_the_table_names_it() -> None:
    # mm-1's link is down: its MM was lost
    source, client, cm, session, (mm2,) = _cluster(up=("mm-2",), down=("mm-1",))

    cm._produce(session, _produce(7))
    assert client.sent == [] and mm2.requests == [], "refused or sent while no primary is reachable"

    source.update([_fixed("mm-2", 4)])  # the failover: at once, no back-off
    (forwarded, fut), *more = mm2.requests
    assert not more and (forwarded["p"], forwarded["e"]) == (PARTITION, 4), forwarded
    fut.set_result({"t": FrameType.PRODUCE_ACK, "p": PARTITION, "o": 10, "l": 10})
    await asyncio.sleep(0)
    assert [(f["t"], f["r"], f["o"]) for f in client.sent] == [(FrameType.PRODUCE_ACK, 7, 10)]


async def test_a_produce_whose_primary_went_away_unanswered_is_forwarded_once_more() -> None:
    source, client, cm, session, (mm1, mm2) = _cluster(up=("mm-1", "mm-2"))

    cm._produce(session, _produce(8))
    (_, lost), *_ = mm1.requests
    mm1.closed = True  # mm-1 died with the request unanswered: the link closes, failing it
    lost.set_exception(ConnectionClosed("cm->mm-1"))
    await asyncio.sleep(0)
    assert client.sent == [] and mm2.requests == [], "mm-2 is not the primary yet"

    source.update([_fixed("mm-2", 4)])
    (forwarded, fut), *_ = mm2.requests
    assert forwarded["e"] == 4, forwarded
    fut.set_exception(ConnectionClosed("cm->mm-2"))  # lost again: now the producer is told
    await asyncio.sleep(0)
    assert [(f["t"], f["r"], f["code"]) for f in client.sent] == [
        (FrameType.ERROR, 8, ErrorCode.MM_UNAVAILABLE)
    ], client.sent
    assert len(mm2.requests) == 1


async def test_a_drained_partition_is_refused_not_held() -> None:
    source, client, cm, session, _ = _cluster(up=(), down=("mm-1",))
    cm._produce(session, _produce(9))
    source.update(
        [_fixed("mm-1", 3).model_copy(update={"accept_writes": False, "type": PartitionType.ON_DEMAND})]
    )
    cm._produce(session, _produce(10))
    assert [(f["r"], f["code"]) for f in client.sent] == [(10, ErrorCode.PARTITION_NOT_WRITABLE)], client.sent
    cm.held.refuse_all("test over")
    assert [(f["r"], f["code"]) for f in client.sent][1:] == [(9, ErrorCode.MM_UNAVAILABLE)]


def _acks(client: Recorder) -> list[tuple[Any, ...]]:
    return [(f["t"], f["r"], f.get("o", f.get("code"))) for f in client.sent]


async def test_a_produce_an_old_primary_refused_goes_to_the_next_one_once_the_table_names_it() -> None:
    source, client, cm, session, (mm1, mm2) = _cluster(up=("mm-1", "mm-2"))

    cm._produce(session, _produce(11))
    cm._produce(session, _produce(12))
    # mm-1 handed the partition over and demoted before this CM's table changed: it refuses both.
    (first, refused_1), (second, refused_2) = mm1.requests
    assert (first["seq"], second["seq"]) == (11, 12)
    refused_1.set_exception(RemoteError(ErrorCode.NOT_PRIMARY, "local-fixed-0 moved"))
    refused_2.set_exception(RemoteError(ErrorCode.STALE_EPOCH, "epoch 3 < 4"))
    await asyncio.sleep(0)
    assert client.sent == [] and mm2.requests == [], "told the producer, or sent before the table moved"

    source.update([_fixed("mm-2", 4)])
    forwarded = [f for f, _ in mm2.requests]
    # In the order they went to mm-1, at the new epoch, the producer's own sequence kept.
    assert [(f["p"], f["e"], f["seq"]) for f in forwarded] == [(PARTITION, 4, 11), (PARTITION, 4, 12)]
    for offset, (_, fut) in enumerate(mm2.requests):
        fut.set_result({"t": FrameType.PRODUCE_ACK, "p": PARTITION, "o": offset, "l": offset})
    await asyncio.sleep(0)
    assert _acks(client) == [(FrameType.PRODUCE_ACK, 11, 0), (FrameType.PRODUCE_ACK, 12, 1)]
    assert cm.stats()["redirects"] == {"held": 0, "held_total": 2, "refused_total": 0}


async def test_a_refusal_that_comes_after_the_table_moved_is_forwarded_at_once() -> None:
    source, client, cm, session, (mm1, mm2) = _cluster(up=("mm-1", "mm-2"))
    cm._produce(session, _produce(13))
    (_, refused), *_ = mm1.requests
    # The table moved first; the request stays pending on mm-1's link only if mm-1 is still the
    # primary in it, so the move is to mm-1 itself at a newer epoch (its copy promoted again).
    source.update([_fixed("mm-1", 5)])
    refused.set_exception(RemoteError(ErrorCode.STALE_EPOCH, "epoch 3 < 5"))
    await asyncio.sleep(0)
    (again, fut) = mm1.requests[1]
    assert again["e"] == 5 and client.sent == [], again
    # Forwarded once only: the next refusal is the producer's to handle.
    fut.set_exception(RemoteError(ErrorCode.NOT_PRIMARY, "still not"))
    await asyncio.sleep(0)
    assert _acks(client) == [(FrameType.ERROR, 13, ErrorCode.NOT_PRIMARY)]
    assert len(mm1.requests) == 2 and mm2.requests == []


@pytest.mark.parametrize("again", ["stored", "refused"])
async def test_a_primary_that_stays_gets_the_produce_once_more_after_the_wait(again: str) -> None:
    """A lease lapse that ends without a failover: the table never moves, so after the wait the CM
    sends the produce once more to the primary it names (as the producer's resend would); what that
    answers goes to the producer, a second refusal too (no third try, nothing held for ever)."""
    source, client, cm, session, (mm1,) = _cluster(up=("mm-1",))
    cm._produce(session, _produce(14))
    mm1.requests[0][1].set_exception(RemoteError(ErrorCode.NOT_PRIMARY, "lease lapsed"))
    await asyncio.sleep(0)
    source.update([_fixed("mm-1", 3)])  # the same table again: nothing newer
    assert client.sent == [] and len(mm1.requests) == 1
    began = asyncio.get_running_loop().time()
    async with asyncio.timeout(5):
        await mm1.requested.wait()
    waited = asyncio.get_running_loop().time() - began
    assert 0.1 < waited < 2.0, waited
    (again_frame, fut) = mm1.requests[1]
    assert (again_frame["seq"], again_frame["e"]) == (14, 3), again_frame
    if again == "stored":
        fut.set_result({"t": FrameType.PRODUCE_ACK, "p": PARTITION, "o": 5, "l": 5})
        await asyncio.sleep(0)
        assert _acks(client) == [(FrameType.PRODUCE_ACK, 14, 5)]
    else:
        fut.set_exception(RemoteError(ErrorCode.NOT_PRIMARY, "still lapsed"))
        await asyncio.sleep(0)
        assert _acks(client) == [(FrameType.ERROR, 14, ErrorCode.NOT_PRIMARY)]
    assert len(mm1.requests) == 2 and cm.stats()["redirects"]["held"] == 0


async def test_a_redirected_produce_goes_before_later_ones_that_waited_for_a_reachable_primary() -> None:
    """One producer's batches in order: the first was refused by the old primary as it demoted, the
    next found its link gone (the old pod exited) and waited for a primary; the new primary must get
    them in that order, or it refuses the later one as out of sequence."""
    source, client, cm, session, (mm1, mm2) = _cluster(up=("mm-1", "mm-2"))
    cm._produce(session, _produce(21))
    mm1.requests[0][1].set_exception(RemoteError(ErrorCode.NOT_PRIMARY, "moved"))
    await asyncio.sleep(0)
    cm.links["mm-1"].conn = None  # the old primary's pod exited
    cm._produce(session, _produce(22))
    assert client.sent == [] and mm2.requests == []
    source.update([_fixed("mm-2", 4)])
    assert [(f["seq"], f["e"]) for f, _ in mm2.requests] == [(21, 4), (22, 4)]


async def test_other_refusals_go_to_the_producer_at_once() -> None:
    _source, client, cm, session, (mm1,) = _cluster(up=("mm-1",))
    cm._produce(session, _produce(15))
    mm1.requests[0][1].set_exception(RemoteError(ErrorCode.NOT_ENOUGH_REPLICAS, "1 in sync"))
    await asyncio.sleep(0)
    assert _acks(client) == [(FrameType.ERROR, 15, ErrorCode.NOT_ENOUGH_REPLICAS)]
    assert cm.stats()["redirects"]["held_total"] == 0


async def test_a_forward_whose_send_failed_is_refused_under_the_clients_correlation_id() -> None:
    _source, client, cm, session, (mm1,) = _cluster(up=("mm-1",))
    mm1.send_fails = True  # the link still looks up, its transport is gone
    cm._produce(session, _produce(31))
    assert _acks(client) == [(FrameType.ERROR, 31, ErrorCode.MM_UNAVAILABLE)]


async def _nothing(link: MMLink) -> None:
    return None
