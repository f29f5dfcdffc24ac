"""The MM's transaction frames from a CM (the MM server's dispatch table hands them here, each in a
task of its own: they wait for replication while the link keeps reading)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hybridmq.api.frames import ErrorCode, FrameType
from hybridmq.broker.mm.commit_error import CommitError
from hybridmq.broker.transactions.participant import TxRefused
from hybridmq.protocol import Connection

if TYPE_CHECKING:
    from hybridmq.broker.mm.context import MMContext

TX_FRAMES = frozenset({FrameType.TX_PREPARE, FrameType.TX_DECIDE, FrameType.TX_END, FrameType.TX_INDOUBT})


async def handle(mm: MMContext, conn: Connection, frame: dict[str, Any]) -> None:
    t = frame["t"]
    try:
        if t == FrameType.TX_INDOUBT:
            age = float(frame.get("age", 10.0))
            txs = [tx for host in mm.hosted for tx in host.tx.in_doubt(age)]
            conn.reply(frame, {"t": FrameType.OK, "txs": txs})
            return
        host = mm.hosted.get(str(frame.get("p", "")))
        if host is None:
            conn.reply_error(frame, ErrorCode.NOT_PRIMARY, f"{mm.name} hosts no {frame.get('p')!r}")
            return
        txid = str(frame["x"])
        if t == FrameType.TX_PREPARE:
            links = mm.subscriptions.of(conn)
            await host.tx.prepare(frame, links)
            mm.wake()
            conn.reply(frame, {"t": FrameType.OK})
        elif t == FrameType.TX_DECIDE:
            commit = await host.tx.decide(txid, bool(frame["commit"]))
            conn.reply(frame, {"t": FrameType.OK, "commit": commit})
        elif t == FrameType.TX_END:
            await host.tx.end(txid, bool(frame["commit"]))
            mm.wake()
            conn.reply(frame, {"t": FrameType.OK})
    except TxRefused as exc:
        conn.reply_error(frame, exc.code, str(exc))
    except CommitError as exc:
        conn.reply_error(frame, exc.frame_code, str(exc))
    except (KeyError, ValueError, TypeError, IndexError) as exc:
        conn.reply_error(frame, ErrorCode.INVALID_REQUEST, f"bad transaction frame: {exc!r}")
