"""A CM holds a produce whose partition has no primary it reaches, and forwards it the moment the
table names one: the producer is answered by the new primary without waiting out a retry back-off.

The CM is the real one, in process, with its table in memory; its links to the MMs and the client's
connection are recorders. One answer per request, with the client's correlation id.
"""

from __future__ import annotations

import asyncio
from typing import Any

from hybridmq.api.assignment import PartitionAssignment, PartitionType
from hybridmq.api.frames import ErrorCode, FrameType, error_frame
from hybridmq.broker.assignment_source import StaticAssignmentSource
from hybridmq.broker.cm.mm_links import MMLink
from hybridmq.broker.cm.server import CMConfig, ConnectionManager
from hybridmq.broker.cm.session import Session
from hybridmq.protocol.connection import ConnectionClosed

PARTITION = "f-0"


class Recorder:
    """A connection: what was sent on it, and the requests made on it (each with its future)."""

    def __init__(self) -> None:
        self.closed = False
        self.write_buffer_size = 0
        self.sent: list[dict[str, Any]] = []
        self.requests: list[tuple[dict[str, Any], asyncio.Future[Any]]] = []

    def send_nowait(self, frame: dict[str, Any]) -> None:
        self.sent.append(frame)

    def reply_error(self, request: dict[str, Any], code: ErrorCode, msg: str) -> None:
        self.sent.append(error_frame(code, msg, request.get("c")))

    def request_nowait(self, frame: dict[str, Any]) -> asyncio.Future[Any]:
        frame["c"] = 1000 + len(self.requests)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.requests.append((dict(frame), fut))
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


def _produce(corr: int) -> dict[str, Any]:
    return {"t": FrameType.PRODUCE, "c": corr, "p": PARTITION, "d": "queue:q", "n": 1, "b": b"r"}


async def test_a_produce_for_a_lost_primary_goes_to_the_new_one_once_the_table_names_it() -> None:
    source = StaticAssignmentSource([_fixed("mm-1", 3)])
    client, mm2 = Recorder(), Recorder()
    cm = _cm(source, {"mm-1": None, "mm-2": mm2})  # mm-1's link is down: its MM was lost
    session = Session("s-1", "alice", "c-1", client)  # type: ignore[arg-type]

    cm._produce(session, _produce(7))
    assert client.sent == [] and mm2.requests == [], "refused or sent while no primary is reachable"

    source.update([_fixed("mm-2", 4)])  # the failover: at once, no back-off
    (forwarded, fut), *more = mm2.requests
    assert not more and (forwarded["p"], forwarded["e"]) == (PARTITION, 4), forwarded
    fut.set_result({"t": FrameType.PRODUCE_ACK, "p": PARTITION, "o": 10, "l": 10})
    await asyncio.sleep(0)
    assert [(f["t"], f["r"], f["o"]) for f in client.sent] == [(FrameType.PRODUCE_ACK, 7, 10)]


async def test_a_produce_whose_primary_went_away_unanswered_is_forwarded_once_more() -> None:
    source = StaticAssignmentSource([_fixed("mm-1", 3)])
    client, mm1, mm2 = Recorder(), Recorder(), Recorder()
    cm = _cm(source, {"mm-1": mm1, "mm-2": mm2})
    session = Session("s-1", "alice", "c-1", client)  # type: ignore[arg-type]

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
    source = StaticAssignmentSource([_fixed("mm-1", 3)])
    client = Recorder()
    cm = _cm(source, {"mm-1": None})
    session = Session("s-1", "alice", "c-1", client)  # type: ignore[arg-type]
    cm._produce(session, _produce(9))
    source.update(
        [_fixed("mm-1", 3).model_copy(update={"accept_writes": False, "type": PartitionType.ON_DEMAND})]
    )
    cm._produce(session, _produce(10))
    assert [(f["r"], f["code"]) for f in client.sent] == [(10, ErrorCode.PARTITION_NOT_WRITABLE)], client.sent
    cm.held.refuse_all("test over")
    assert [(f["r"], f["code"]) for f in client.sent][1:] == [(9, ErrorCode.MM_UNAVAILABLE)]


async def _nothing(link: MMLink) -> None:
    return None
