"""ACK and NACK frames from a CM (the MM server's dispatch table hands them here).

An ACK names the delivery (``p``, ``o``: its first offset), the subscription (``s``), the partition
epoch the CM routed it under (``e``) and, from current clients, the hand-out it acknowledges (``rd``,
the DELIVER's delivery count - 1), the records of it (``a`` = ``[first, last]``; without it all the
delivery has left) and a correlation id (``c``). A NACK gives the records back for redelivery, or
with ``rq`` false rejects them for good: they go to ``_DMQ``. With ``c`` it is answered: ``OK`` once the
acknowledgement is committed (it survives a failover; the batch is never delivered again), or
``ERROR STALE_DELIVERY`` when that delivery is not outstanding here (already acknowledged, given
back, or delivered again since, e.g. by a new primary after a failover): the batch is then
redelivered, flagged, or was already acknowledged. Without ``c`` nothing is answered (older clients).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hybridmq.api.frames import ErrorCode, FrameType
from hybridmq.api.requests import Ack, Nack
from hybridmq.protocol import Connection

if TYPE_CHECKING:
    from hybridmq.broker.mm.context import MMContext


def handle(mm: MMContext, conn: Connection, frame: Ack) -> None:
    nack = isinstance(frame, Nack)
    requeue = frame.requeue if isinstance(frame, Nack) else True
    answer = frame.c is not None
    link = mm.subscriptions.get(conn, str(frame.subscription))
    host = mm.hosted.get(frame.partition)
    attempt = frame.attempt + 1 if frame.attempt is not None else None
    try:
        first, last = _records(frame)
    except ValueError as exc:
        if answer:
            conn.reply_error(frame, ErrorCode.INVALID_REQUEST, f"bad {'NACK' if nack else 'ACK'}: {exc}")
        return
    if link is None or host is None:
        why = f"no subscription {frame.subscription!r} on {frame.partition!r} here"
    elif frame.epoch is not None and frame.epoch < host.epoch:
        # routed under an older epoch: the cursor moved on without it
        why = f"epoch {frame.epoch} < {host.epoch} of {host.name}"
    elif host.ack(
        link,
        frame.offset,
        nack,
        attempt,
        (conn, frame) if answer and not (nack and requeue) else None,
        first,
        last,
        requeue,
    ):
        mm.wake()
        if answer and nack and requeue:
            conn.reply(frame, {"t": FrameType.OK})
        return
    else:
        what = f" records {first}..{last} of" if first is not None else ""
        why = f"{what} delivery {frame.partition}:{frame.offset} (attempt {attempt}) is not outstanding"
    if answer:
        conn.reply_error(frame, ErrorCode.STALE_DELIVERY, why)


def _records(frame: Ack) -> tuple[int | None, int | None]:
    """The ``[first, last]`` records an ACK/NACK names inside its delivery (None: all it has left);
    the decoder checked it is two integers."""
    if frame.records is None:
        return None, None
    first, last = frame.records
    if not frame.offset <= first <= last:
        raise ValueError(f"records {first}..{last} are not inside the delivery at {frame.offset}")
    return first, last
