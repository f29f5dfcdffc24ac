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
from hybridmq.api.requests import ReaderCommit
from hybridmq.broker.log.control import ReaderCursor
from hybridmq.broker.log.errors import LogError
from hybridmq.broker.mm.commit_error import CommitError
from hybridmq.broker.mm.fetch_handler import primary_host
from hybridmq.protocol import Connection

if TYPE_CHECKING:
    from hybridmq.broker.mm.context import MMContext

log = logging.getLogger(__name__)


async def handle(mm: MMContext, conn: Connection, frame: ReaderCommit) -> None:
    reply = await commit(mm, frame)
    if not conn.closed:
        conn.send_nowait(reply)


async def commit(mm: MMContext, frame: ReaderCommit) -> dict[str, Any]:
    """Store the reader's offset (its decoder checked the fields: a non-empty partition, a reader
    name of 1..256 chars, an offset >= 0)."""
    corr, name, reader, offset = frame.c, frame.partition, frame.reader, frame.offset
    host = primary_host(mm, name, frame.partition_epoch, corr)
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
