"""The MM's internal ``_LOG`` partition on a real log directory: it takes only ``topic:_LOG``
(anything else is refused with a clear error and nothing stored) and keeps at most about
``retain_bytes`` (oldest whole segments deleted), whatever its consumers' cursors."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import msgpack
from host_wire import decoded

from hybridmq.api.frames import LOG_DESTINATION, ErrorCode, FrameType
from hybridmq.broker.log_events import log_partition, log_partition_owner
from hybridmq.broker.mm.internal_log import SEGMENT_BYTES, open_internal_log


class Replies:
    closed = False

    def __init__(self) -> None:
        self.frames: list[dict[str, Any]] = []

    def send_nowait(self, frame: dict[str, Any]) -> None:
        self.frames.append(frame)


def produce(dest: str, c: int, size: int = 1000) -> dict[str, Any]:
    blob = msgpack.packb([[b"v" * size, None, None, 0]])
    return decoded({"t": FrameType.PRODUCE, "c": c, "p": "_log.mm-7", "d": dest, "n": 1, "b": blob, "e": 0})


async def until(predicate: Any) -> None:
    for _ in range(200):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("timed out")


async def test_only_LOG_is_stored_and_retention_is_by_size(tmp_path: Path) -> None:
    assert log_partition("mm-7") == "_log.mm-7" and log_partition_owner("_log.mm-7") == "mm-7"
    assert log_partition_owner("fixed-0") is None and log_partition_owner("_log.") is None
    host = open_internal_log("mm-7", tmp_path, 1 << 20, retention_interval=3600, wake=None)
    try:
        assert host.name == "_log.mm-7" and (tmp_path / "_log").is_dir()
        replies = Replies()
        host.enqueue_produce(replies, produce("topic:orders", 1))
        await until(lambda: replies.frames)
        assert replies.frames[0]["t"] == FrameType.ERROR
        assert replies.frames[0]["code"] == ErrorCode.INVALID_REQUEST
        assert "only takes topic:_LOG" in replies.frames[0]["msg"]
        assert host.storage.end_offset == 0

        host.retain_bytes = 3 * SEGMENT_BYTES
        for i in range(8 * SEGMENT_BYTES // 1000):
            host.enqueue_produce(replies, produce(LOG_DESTINATION, i + 2))
        await until(lambda: len(replies.frames) == 1 + 8 * SEGMENT_BYTES // 1000)
        assert all(f["t"] == FrameType.PRODUCE_ACK for f in replies.frames[1:])
        end = host.storage.end_offset
        assert host.storage.log.size_bytes > 7 * SEGMENT_BYTES
        start = host.trim()
        assert 0 < start < end and host.storage.start_offset == start
        assert host.storage.log.size_bytes <= host.retain_bytes
        assert host.storage.log.size_bytes > host.retain_bytes - SEGMENT_BYTES - 2000  # no more than needed
        assert host.trim() == start  # within the budget: nothing more goes
    finally:
        await host.stop()
