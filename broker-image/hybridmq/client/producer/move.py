"""The on-demand move: a producer whose on-demand partition stops taking writes moves on, once.

An on-demand partition drains after its primary was lost (or was deleted): it refuses writes. An
on-demand producer that did not name its partition then moves to the one the CM assigns it now -
exactly once and in order: it asks the old partition which refused batches it already stores
(FETCH_META ``pids``), completes those as acknowledged and resends only the rest.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from hybridmq.api.assignment import PartitionType
from hybridmq.api.frames import ErrorCode, FrameType
from hybridmq.client.connection import raise_remote
from hybridmq.client.producer.sender import MAX_RETRY_S, Refused, Sender
from hybridmq.protocol import RemoteError

log = logging.getLogger(__name__)

MOVE_WAIT_S = 3.0  # how long a move waits for the old partition's other in-flight batches
STATE_WAIT_S = 10.0  # how long it asks the old partition (being taken over) what it stores
PACE_S = 0.02


class OnDemandMove:
    def __init__(self, sender: Sender) -> None:
        self.sender = sender
        self._parked: dict[str, list[Refused]] = {}  # old partition -> the batches it refused
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._lock = asyncio.Lock()
        sender.on_refused = self.park

    def park(self, refused: Refused) -> bool:
        """The partition refused the batch (draining / deleted): the move task of that partition
        resends it elsewhere unless the old partition already stores it."""
        old = str(refused[0]["p"])
        self._parked.setdefault(old, []).append(refused)
        if old not in self._tasks:
            self._tasks[old] = asyncio.get_running_loop().create_task(self._move(old))
        return True

    async def _move(self, old: str) -> None:
        """Move away from ``old`` (once for all the batches it refused): open a producer on another
        on-demand partition (new producer id and sequence space), wait (bounded) until the other
        batches in flight on ``old`` came back, ask ``old``'s current primary (the replica that
        took it over to drain it) which of them it stores - the producer-sequence table is
        replicated with the log - and complete those as acknowledged; resend only the rest, in
        their original order, then the batches held back meanwhile. Exactly once, order kept."""
        sender = self.sender
        loop = asyncio.get_running_loop()
        delay = PACE_S
        try:
            while self._parked.get(old):
                try:
                    await self._round(old)
                except Exception as exc:
                    deadline = min((item[3] for item in self._parked.get(old) or ()), default=0.0)
                    if _none_writable(exc) and old == sender.partition and loop.time() + delay < deadline:
                        # Every on-demand partition is offline or draining (their MMs lost): one is
                        # writable again once an MM is back; ask again until the batches' deadline.
                        await asyncio.sleep(delay)
                        delay = min(delay * 2, MAX_RETRY_S)
                        continue
                    sender.release_held()
                    for frame, result, size, _ in self._parked.pop(old, []):
                        sender.finish(frame, result, size, raise_remote(exc))
        finally:
            self._tasks.pop(old, None)

    async def _round(self, old: str) -> None:
        sender = self.sender
        async with self._lock:
            if old == sender.partition:
                if sender.held is None:
                    sender.held = []
                await asyncio.sleep(PACE_S)  # bounded pace if the CM's view lags (moves again)
                reply = await sender.session.conn.request(
                    {"t": FrameType.OPEN_PRODUCER, "ptype": str(PartitionType.ON_DEMAND)}
                )
                sender.partition = reply["partition"]
                sender.pid = int(reply.get("pid", -1))
                sender.pid_gen[sender.pid] = len(sender.pid_gen)
                sender.pepoch = 0
                sender.seq = 0
                # The other batches in flight on the old partition come back refused (or acked)
                # shortly: gather them so that they are resolved and resent together, in order.
                for _ in range(int(MOVE_WAIT_S / PACE_S)):
                    if old not in sender.chains.values():
                        break
                    await asyncio.sleep(PACE_S)
            parked = self._parked.pop(old, [])
            if not parked:
                sender.release_held()
                return
            stored = await self._stored_in(old, {int(item[0]["pid"]) for item in parked})
            gen = sender.pid_gen
            parked.sort(key=lambda i: (gen.get(int(i[0]["pid"]), 0), i[0]["pep"], i[0]["seq"]))
            for frame, result, size, deadline in parked:
                state = stored.get(int(frame["pid"])) if stored is not None else None
                if (
                    state is not None
                    and int(frame["pep"]) == int(state[0])
                    and int(frame["seq"]) + int(frame["n"]) - 1 <= int(state[1])
                ):
                    # Stored by the lost primary, acknowledgement lost: it is acknowledged now.
                    offset = next((int(b[2]) for b in state[2] if int(b[0]) == int(frame["seq"])), -1)
                    sender.finish(frame, result, size, None, {"o": offset})
                    continue
                frame = dict(frame, p=sender.partition, pid=sender.pid, pep=sender.pepoch, seq=sender.seq)
                sender.seq += int(frame["n"])
                sender.attempt(frame, result, size, deadline, 0.05)
            sender.release_held()

    async def _stored_in(self, partition: str, pids: set[int]) -> dict[int, list[Any]] | None:
        """What ``partition`` stores of these producer ids: ``{pid: [producer epoch, last sequence,
        [[first seq, last seq, base offset, last offset], ...]]}`` (FETCH_META ``pids``), asked of its
        current primary until it answers (a takeover is under way) or ``STATE_WAIT_S``; None when
        it cannot tell (the partition is gone, or no answer in time)."""
        sender = self.sender
        loop = asyncio.get_running_loop()
        until = loop.time() + STATE_WAIT_S
        why = ""
        while True:
            try:
                reply = await sender.session.conn.request(
                    {"t": FrameType.FETCH_META, "p": [partition], "pids": sorted(pids)}, timeout=2.0
                )
                entries = reply.get("partitions") or []
                if not entries:
                    log.warning(
                        "producer %s: partition %s is gone; resending its refused batches without "
                        "knowing what it stored (one it stored unacknowledged may now be stored twice)",
                        sender.producer_id,
                        partition,
                    )
                    return None
                entry = entries[0]
                if entry.get("err") is None and entry.get("producers") is not None:
                    return {int(k): v for k, v in dict(entry["producers"]).items()}
                why = str(entry.get("err"))
            except Exception as exc:
                why = repr(exc)
            if loop.time() >= until:
                log.warning(
                    "producer %s: no producer state from partition %s in %.0fs (%s); resending its "
                    "refused batches (one it stored unacknowledged may now be stored twice)",
                    sender.producer_id,
                    partition,
                    STATE_WAIT_S,
                    why,
                )
                return None
            await asyncio.sleep(0.1)


def _none_writable(exc: BaseException) -> bool:
    """The CM found no writable on-demand partition to move to (not: this producer is refused)."""
    return isinstance(exc, RemoteError) and exc.code == ErrorCode.UNKNOWN_PARTITION
