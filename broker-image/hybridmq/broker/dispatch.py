"""Frame dispatch: which handler takes each frame type, and whether the read loop waits for it.

A connection's read loop hands every request frame to its server's ``Dispatcher``. The table says
for each frame type how its handler runs, so that whether a frame holds up the frames behind it on
the same connection is written down here, not implied by what a handler returns:

* ``INLINE``: runs in the read loop and returns at once; it may return a drain to wait on, which
  is backpressure (a produce while the MM's link is full);
* ``AWAITED``: a coroutine the read loop waits for: the connection's next frame is read after it
  answered (requests whose answers keep the order they were asked in);
* ``SPAWNED``: a coroutine run beside the read loop in the dispatcher's task set: the connection
  keeps reading (and answering PINGs) while it waits, e.g. on replication.

A frame whose fields are missing or of the wrong type is answered ``INVALID_REQUEST`` and the
connection reads on: a typed request (``hybridmq.api.requests``) before any handler sees it (its
decoder made it an ``InvalidFrame``), a dict frame when its handler raises ``KeyError``,
``ValueError`` or ``TypeError``. A frame type with no entry is answered the same way.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from hybridmq.api.frames import ErrorCode
from hybridmq.api.requests import DATA_REQUESTS, Request
from hybridmq.protocol import Connection
from hybridmq.protocol.codec import Decoded, FrameDecoder, InvalidFrame

# What a broker's connections decode: the data path's requests as typed Structs, the rest as dicts.
REQUESTS = FrameDecoder(DATA_REQUESTS)
C = TypeVar("C")  # what a handler is called with beside the frame: a session, a connection


class Mode(enum.Enum):
    INLINE = "inline"
    AWAITED = "awaited"
    SPAWNED = "spawned"


@dataclass(frozen=True, slots=True)
class Entry(Generic[C]):
    handler: Callable[[C, Any], Any]  # given the frame: a dict, or the Struct of a typed request
    mode: Mode = Mode.INLINE


class Dispatcher(Generic[C]):
    def __init__(self, table: Mapping[int, Entry[C]], conn_of: Callable[[C], Connection]) -> None:
        self.table = dict(table)
        self.conn_of = conn_of  # where a refusal is answered
        self.tasks: set[asyncio.Task[None]] = set()  # the SPAWNED handlers still running

    def __call__(self, ctx: C, frame: Decoded) -> Any:
        """Run ``frame``'s handler; returns what the read loop must wait for (None: nothing)."""
        if isinstance(frame, Request):
            t = frame.TYPE
        elif isinstance(frame, InvalidFrame):
            self.conn_of(ctx).reply_error(frame, ErrorCode.INVALID_REQUEST, f"bad frame: {frame.reason}")
            return None
        else:
            t = frame["t"]
        entry = self.table.get(t)
        if entry is None:
            self.conn_of(ctx).reply_error(frame, ErrorCode.INVALID_REQUEST, f"unexpected frame type {t}")
            return None
        try:
            result = entry.handler(ctx, frame)
        except (KeyError, ValueError, TypeError) as exc:
            self.conn_of(ctx).reply_error(frame, ErrorCode.INVALID_REQUEST, f"bad frame: {exc!r}")
            return None
        if entry.mode is Mode.SPAWNED:
            self.spawn(result)
            return None
        return result

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
