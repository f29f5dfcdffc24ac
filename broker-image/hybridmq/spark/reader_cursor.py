"""Named reader cursors for the streaming source: option ``readerName``.

With ``readerName`` set, each micro-batch commit of a streaming query on a live cluster commits the
offsets it has processed (``{partition: next offset}``, Spark's own end offsets) as that reader's
cursor in each partition (``Fetcher.commit_reader``; stored and replicated in the partition log).
A draining on-demand partition is then not deleted while this reader is behind its end, so a
query that was stopped, or is slow, still finds the data when it reads on (from its checkpoint).

A failed commit only logs a warning: the cursor stays where it was, which holds data longer, never
shorter. A partition that is gone is skipped.
"""

import asyncio
import logging
from collections.abc import Mapping

from hybridmq.api.frames import ErrorCode
from hybridmq.client.connection import ClientError
from hybridmq.client.fetcher import Fetcher
from hybridmq.protocol.deadline import within

log = logging.getLogger("hybridmq.spark")

READER_NAME = "readername"  # lower-cased option key (options are case-insensitive)


def commit_processed(source: Mapping[str, str], end: Mapping[str, int]) -> None:
    """Commit ``end`` as the reader cursor of ``source["readername"]``; nothing without the option."""
    reader = (source.get(READER_NAME) or "").strip()
    if not reader:
        return
    bootstrap = source.get("bootstrap")
    if not bootstrap:
        raise ValueError("option readerName needs a live cluster (option 'bootstrap'), not an exported log")
    timeout = float(source.get("timeout", "30"))
    try:
        asyncio.run(within(_commit(source, bootstrap, reader, end), timeout))
    except Exception as exc:
        log.warning("reader %s: committing offsets %s failed: %r", reader, dict(end), exc)


async def _commit(source: Mapping[str, str], bootstrap: str, reader: str, end: Mapping[str, int]) -> None:
    fetcher = await Fetcher.connect(bootstrap, user=source.get("username"), password=source.get("password"))
    try:
        for name, offset in sorted(end.items()):
            try:
                await fetcher.commit_reader(reader, name, int(offset))
            except ClientError as exc:
                if exc.code != ErrorCode.UNKNOWN_PARTITION:
                    raise
    finally:
        await fetcher.close()
