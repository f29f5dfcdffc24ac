"""Requests held for a partition that cannot be served here yet, then served the moment it can.

Kafka's purgatory, for produces that arrive during a failover, in two places:

* an MM holds a produce routed to it for a partition it is about to lead (the promotion is under
  way; ``MessageManager._taking_over``) and serves it once it leads it, or refuses it ``NOT_PRIMARY``;
* a CM holds a produce whose partition has no reachable primary (its MM was lost, the table does not
  name a new one yet, or the link to it is not up) and forwards it the moment the table names a
  primary it can reach, or refuses it ``MM_UNAVAILABLE``; and a produce the primary it went to
  refused as no longer its own (``NOT_PRIMARY``, ``STALE_EPOCH``: a handoff, the MM's table ahead of
  the CM's) until the table names the partition at a newer epoch, or, when none comes in time,
  sends it once more where the table points (what the producer's own resend would do).
  Refused, the producer would resend after its back-off (up to half a second) instead.

Either way the refusal is retriable. A request is refused when the wait gives up (``refuse``), when it
passes ``max_wait_s`` (or handed to ``on_expiry``, when given), and at once when ``max_held``
requests or ``max_bytes`` of records already wait: the broker holds bounded memory for requests it
does not serve yet.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

from hybridmq.api.frames import ErrorCode
from hybridmq.api.requests import Produce

MAX_WAIT_S = 5.0
MAX_HELD = 10_000
MAX_HELD_BYTES = 64 * 1024 * 1024  # of record payload: a few full batches, not a flood's worth


class Requester(Protocol):
    """Who is answered: a CM's connection (on an MM) or a client's session (on a CM)."""

    @property
    def closed(self) -> bool: ...

    def reply_error(self, request: Any, code: ErrorCode, msg: str) -> None: ...


R = TypeVar("R", bound=Requester)


class HeldRequests(Generic[R]):
    def __init__(
        self,
        refusal: ErrorCode,
        max_wait_s: float = MAX_WAIT_S,
        max_held: int = MAX_HELD,
        max_bytes: int = MAX_HELD_BYTES,
        on_expiry: Callable[[R, Produce], object] | None = None,
    ) -> None:
        self.refusal = refusal  # the retriable error a request that is not served gets
        self.on_expiry = on_expiry  # takes what waited ``max_wait_s`` instead of a refusal
        self.max_wait_s = max_wait_s
        self.max_held = max_held
        self.max_bytes = max_bytes
        self._held: dict[str, list[tuple[R, Produce]]] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._count = 0
        self._bytes = 0
        self.held_total = 0  # requests ever held
        self.refused_total = 0  # of those, refused in the end (not served here)

    def __len__(self) -> int:
        return self._count

    def hold(self, partition: str, conn: R, frame: Produce) -> bool:
        """Hold ``frame`` until ``partition`` is served here; False (not held) when full."""
        size = len(frame.records)
        if self._count >= self.max_held or self._bytes + size > self.max_bytes:
            return False
        waiting = self._held.setdefault(partition, [])
        waiting.append((conn, frame))
        self._count += 1
        self._bytes += size
        self.held_total += 1
        if partition not in self._timers:
            loop = asyncio.get_running_loop()
            why = f"{partition}: no primary here within {self.max_wait_s:g}s"
            self._timers[partition] = loop.call_later(self.max_wait_s, self._expire, partition, why)
        return True

    def release(
        self, partition: str, serve: Callable[[R, Produce], object], through_epoch: int | None = None
    ) -> int:
        """The partition is served here now: hand each held request to ``serve``, in arrival order;
        with ``through_epoch``, only those routed at that epoch or before (the table names a newer
        one now)."""
        held = self._take(partition, through_epoch)
        for conn, frame in held:
            if not conn.closed:
                serve(conn, frame)
        return len(held)

    def refuse(self, partition: str, why: str, through_epoch: int | None = None) -> int:
        """The partition will not be served here (or not soon): refuse what waits for it, or only
        the requests routed at ``through_epoch`` or before (the table at that epoch names another
        primary; a request routed at a newer epoch may still be for this MM)."""
        held = self._take(partition, through_epoch)
        self.refused_total += len(held)
        for conn, frame in held:
            if not conn.closed:
                conn.reply_error(frame, self.refusal, why)
        return len(held)

    def _expire(self, partition: str, why: str) -> None:
        if self.on_expiry is None:
            self.refuse(partition, why)
        else:
            self.release(partition, self.on_expiry)

    def partitions(self) -> list[str]:
        """The partitions something is held for."""
        return list(self._held)

    def stats(self) -> dict[str, int]:
        return {"held": self._count, "held_total": self.held_total, "refused_total": self.refused_total}

    def refuse_all(self, why: str) -> None:
        for partition in list(self._held):
            self.refuse(partition, why)

    def _take(self, partition: str, through_epoch: int | None = None) -> list[tuple[R, Produce]]:
        if partition not in self._held:
            return []
        waiting = self._held.pop(partition)
        if through_epoch is None:
            taken = waiting
        else:
            taken = [h for h in waiting if _epoch(h[1]) <= through_epoch]
            kept = [h for h in waiting if _epoch(h[1]) > through_epoch]
            if kept:
                self._held[partition] = kept
        if partition not in self._held:
            timer = self._timers.pop(partition, None)
            if timer is not None:
                timer.cancel()
        self._count -= len(taken)
        self._bytes -= sum(len(h[1].records) for h in taken)
        return taken


def _epoch(frame: Produce) -> int:
    return -1 if frame.epoch is None else frame.epoch
