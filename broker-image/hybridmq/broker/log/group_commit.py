"""Group commit: one fsync, run in a worker thread, acknowledges every append made before it.

The committer belongs to one log and one event loop. Appends stay synchronous and cheap (they only
``notify_append``); producers wait for durability with ``await flush_until(end_offset)``. While an
fsync runs in the thread, new appends continue on the loop and the next fsync covers all of them.

The log side is the :class:`Syncable` protocol: ``begin_sync`` (loop thread) snapshots what must
be synced, ``run_sync`` (worker thread) does the fsyncs, ``end_sync`` (loop thread) publishes the
new durable offset.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from .errors import LogError

_executor: ThreadPoolExecutor | None = None


def fsync_executor() -> ThreadPoolExecutor:
    """The process-wide thread pool that runs fsyncs (shared by all logs)."""
    global _executor
    if _executor is None:
        _executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="hmq-fsync")
    return _executor


class LogTruncatedError(LogError):
    """The offset being waited for was removed by a truncation before it became durable."""


class Syncable(Protocol):
    @property
    def durable_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    def begin_sync(self) -> Any | None: ...

    def run_sync(self, plan: Any) -> None: ...

    def end_sync(self, plan: Any) -> None: ...

    def abort_sync(self, plan: Any) -> None: ...


class GroupCommitter:
    def __init__(
        self,
        log: Syncable,
        *,
        max_delay_ms: float,
        max_bytes: int,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self._log = log
        self._max_delay = max_delay_ms / 1000.0
        self._max_bytes = max_bytes
        self._loop = loop or asyncio.get_running_loop()
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()
        self._task: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._again = False
        self._error: BaseException | None = None
        self.syncs = 0  # number of fsync rounds, for metrics and tests

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    async def flush_until(self, offset: int) -> None:
        """Return once every offset below ``offset`` is durable (raise if fsync failed)."""
        if self._log.durable_offset >= offset:
            return
        if self._error is not None:
            raise LogError("log storage failed") from self._error
        future: asyncio.Future[None] = self._loop.create_future()
        heapq.heappush(self._waiters, (offset, next(self._seq), future))
        self._kick()
        await future

    def notify_append(self, unsynced_bytes: int) -> None:
        """Called by the log after each append (loop thread)."""
        if unsynced_bytes >= self._max_bytes:
            self._kick()
        elif self._timer is None and self._task is None:
            self._timer = self._loop.call_later(self._max_delay, self._kick)

    def on_truncate(self, log_end_offset: int) -> None:
        """Fail the waiters whose offsets were truncated away."""
        kept = []
        for item in self._waiters:
            if item[0] > log_end_offset:
                if not item[2].done():
                    item[2].set_exception(LogTruncatedError(f"offset {item[0] - 1} was truncated"))
            else:
                kept.append(item)
        heapq.heapify(kept)
        self._waiters = kept

    def _kick(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._task is not None:
            self._again = True
            return
        self._task = self._loop.create_task(self._run())

    async def _run(self) -> None:
        try:
            while True:
                self._again = False
                plan = self._log.begin_sync()
                if plan is not None:
                    try:
                        await self._loop.run_in_executor(fsync_executor(), self._log.run_sync, plan)
                    except asyncio.CancelledError:
                        self._log.abort_sync(plan)
                        raise
                    except BaseException as exc:
                        self._log.abort_sync(plan)
                        self._fail(exc)
                        return
                    self._log.end_sync(plan)
                    self.syncs += 1
                self._release()
                if not self._again and not self._waiters:
                    break
                if plan is None and not self._again:
                    break
        finally:
            self._task = None
        # Appends made during the last round with nobody waiting: sync them after the delay.
        if self._timer is None and self._log.durable_offset < self._log.log_end_offset:
            self._timer = self._loop.call_later(self._max_delay, self._kick)

    def _release(self) -> None:
        durable = self._log.durable_offset
        waiters = self._waiters
        while waiters and waiters[0][0] <= durable:
            future = heapq.heappop(waiters)[2]
            if not future.done():
                future.set_result(None)

    def _fail(self, exc: BaseException) -> None:
        self._error = exc
        for _, _, future in self._waiters:
            if not future.done():
                future.set_exception(LogError(f"fsync failed: {exc!r}"))
        self._waiters = []

    async def close(self) -> None:
        """Wait for a running fsync, then stop (pending waiters get a final sync first)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        while self._task is not None:
            task = self._task
            try:
                await asyncio.shield(task)
            except Exception:
                break
