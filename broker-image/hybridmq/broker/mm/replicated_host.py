"""A ``PartitionHost`` that is the primary of a replicated partition.

It adds two things to the MM's partition host: a *guard* checked before each produce is appended
(lease valid, enough replicas in sync, an unknown idempotent producer starts at sequence 0: else a
retriable error goes back and nothing is stored) and
``halt()``, which stops the host without closing its log (the log stays open for the backup role
that follows a demotion) and answers whatever produce was still queued with NOT_PRIMARY.

``CommitError`` is what the commit waiter (awaited by the host's produce worker before it sends
acknowledgements) raises: its ``frame_code`` tells the worker which error to send instead
(NOT_PRIMARY or MM_UNAVAILABLE: both make the client resend; the resend is stored once).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from hybridmq.api.frames import ErrorCode, error_frame
from hybridmq.broker.mm.partition import PartitionHost

Guard = Callable[[dict[str, Any]], tuple[ErrorCode, str] | None]


class CommitError(Exception):
    def __init__(self, code: ErrorCode, msg: str) -> None:
        super().__init__(msg)
        self.frame_code = code


class ReplicatedPartitionHost(PartitionHost):
    guard: Guard | None = None

    def _append_one(self, frame: dict[str, Any]) -> dict[str, Any]:
        if self.guard is not None:
            refused = self.guard(frame)
            if refused is not None:
                return error_frame(refused[0], refused[1], frame.get("c"))
        return super()._append_one(frame)

    async def halt(self) -> None:
        """Stop serving (tasks cancelled, queued produces refused) but leave the log open."""
        self.primary = False
        # Let a produce worker that is failing its pending acknowledgements send them first.
        for _ in range(3):
            await asyncio.sleep(0)
        for _ in range(10):  # cancel again if a task swallowed it (3.11 wait_for races)
            pending = [t for t in self._tasks if not t.done()]
            if not pending:
                break
            for t in pending:
                t.cancel()
            await asyncio.wait(pending, timeout=0.5)
        self._tasks.clear()
        self.refuse_ack_replies(ErrorCode.NOT_PRIMARY, f"{self.name} moved to another primary")
        queued = list(self._produce_q)
        self._produce_q.clear()
        for conn, frame in queued:
            if not conn.closed:
                conn.send_nowait(
                    error_frame(
                        ErrorCode.NOT_PRIMARY, f"{self.name} moved to another primary", frame.get("c")
                    )
                )
