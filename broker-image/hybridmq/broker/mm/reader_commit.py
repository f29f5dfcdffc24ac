"""READER_COMMIT on the MM: store a named reader's committed offset in a hosted partition.

A stream reader (the PySpark source with ``readerName``) that reads a partition by offset commits
how far it has processed: ``{p, pe, rn, o}`` = partition, partition epoch (from the CM), reader name,
the next offset it will read. The cursor is a ``ReaderCursor`` control record in the partition log,
flushed and (with replication) committed before the OK goes back, so it survives a failover like
the data; the primary reports how far its furthest-behind reader is from the end of the data
(``reader_lag``) and the operator keeps a draining on-demand partition while that is not zero.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from hybridmq.api.frames import ErrorCode, FrameType, error_frame
from hybridmq.broker.log.control import ReaderCursor
from hybridmq.broker.log.errors import LogError
from hybridmq.broker.mm.commit_error import CommitError
from hybridmq.broker.mm.fetch_handler import primary_host
from hybridmq.protocol import Connection

if TYPE_CHECKING:
    from hybridmq.broker.mm.context import MMContext

log = logging.getLogger(__name__)

MAX_READER_NAME = 256


def parse(frame: dict[str, Any]) -> tuple[str, str, int]:
    """``(partition, reader, offset)``; ValueError with the reason for a malformed request."""
    name, reader, offset = frame.get("p"), frame.get("rn"), frame.get("o")
    if not isinstance(name, str) or not name:
        raise ValueError("p (partition) must be a non-empty string")
    if not isinstance(reader, str) or not 1 <= len(reader) <= MAX_READER_NAME:
        raise ValueError(f"rn (reader name) must be a string of 1..{MAX_READER_NAME} chars")
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ValueError("o (offset) must be an integer >= 0")
    return name, reader, offset


async def handle(mm: MMContext, conn: Connection, frame: dict[str, Any]) -> None:
    reply = await commit(mm, frame)
    if not conn.closed:
        conn.send_nowait(reply)


async def commit(mm: MMContext, frame: dict[str, Any]) -> dict[str, Any]:
    corr = frame.get("c")
    try:
        name, reader, offset = parse(frame)
    except ValueError as exc:
        return error_frame(ErrorCode.INVALID_REQUEST, f"bad reader commit: {exc}", corr)
    epoch = frame.get("pe")
    host = primary_host(mm, name, epoch if isinstance(epoch, int) else None, corr)
    if isinstance(host, dict):
        return host
    end = host.storage.end_offset
    if offset > end:
        err = error_frame(ErrorCode.OFFSET_OUT_OF_RANGE, f"{name}: offset {offset} > log end {end}", corr)
        err.update(start=host.storage.start_offset, hw=end)
        return err
    try:
        host.append_control([ReaderCursor(reader, offset)])
        await host.commit_control(host.storage.end_offset)  # like consumer cursors
    except LogError as exc:
        return error_frame(ErrorCode.MM_UNAVAILABLE, f"{name}: reader cursor not stored: {exc}", corr)
    except CommitError as exc:
        return error_frame(exc.frame_code, f"{name}: reader cursor not committed: {exc}", corr)
    except Exception as exc:
        log.exception("storing reader cursor %s on %s", reader, name)
        return error_frame(ErrorCode.INTERNAL, f"{name}: reader cursor not committed: {exc}", corr)
    host.readers[reader] = offset
    return {"t": FrameType.OK, "r": corr, "p": name, "rn": reader, "o": offset}
