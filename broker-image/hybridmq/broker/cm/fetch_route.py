"""FETCH / FETCH_META on the CM: read a partition by offset through the partition's primary MM.

Clients only know CMs, so reads by offset (the PySpark data source, the audit) go through
one like everything else:

* FETCH ``{c, p, o, e?, mb?, i?}`` is forwarded to the primary MM of ``p`` with the partition epoch
  (``pe``); the MM answers from its log (``broker/mm/fetch_handler.py``). Errors come back under the
  client's correlation id with their details (OFFSET_OUT_OF_RANGE carries ``start`` and ``hw``); a
  partition that is not in the assignment table (an on-demand partition that was garbage
  collected) is UNKNOWN_PARTITION, a primary the CM has no link to is MM_UNAVAILABLE.
* The session sees only what it may consume: a batch of a destination its consume ACL denies, or
  of an internal ``_`` destination (unless ``i`` asks for ``topic:_LOG`` / ``queue:_DMQ``), is
  replaced by a stub ``{o, n, ctl: true, skip: "acl" | "internal"}`` that keeps the offsets
  contiguous without its content.
* FETCH_META ``{c, p?, i?}`` lists partitions from the assignment table with each one's log start,
  high watermark, log end and incarnation (a random id born with the partition's data, kept by
  failovers, new when the partition is re-created) as its primary MM reports them (``err`` names
  why they are missing).
  With ``i`` it adds the internal log partition ``_log.<mm>`` of each MM that answers (type
  ``internal``: the ``topic:_LOG`` events, never in a user partition), which FETCH with ``i``
  reads (epoch 0).
  With ``pids`` (producer ids) each entry also has ``producers``: ``{pid: [producer epoch, last
  stored sequence, [[first seq, last seq, base offset, last offset], ...]]}`` from the partition
  log's replicated producer-sequence table, answered only by the primary of the table's epoch (an
  on-demand producer that moves after a failover asks its old partition what it already stores).
* READER_COMMIT ``{c, p, rn, o}`` stores reader ``rn``'s committed offset ``o`` in partition ``p``
  (``broker/mm/reader_commit.py``): forwarded to the primary MM like a FETCH; OK once replicated.

A FETCH is answered before the session's next frame is read (the handler is awaited), which bounds
what one reading client can make the CM buffer to one reply.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import msgspec

from hybridmq.api.frames import (
    DMQ_DESTINATION,
    LOG_DESTINATION,
    ErrorCode,
    FrameType,
    error_frame,
    is_reserved,
)
from hybridmq.api.requests import Fetch, ReaderCommit
from hybridmq.broker.log_events import log_partition, log_partition_owner
from hybridmq.broker.routing import Unroutable
from hybridmq.protocol import RemoteError
from hybridmq.protocol.codec import Decoded

if TYPE_CHECKING:
    from hybridmq.broker.cm.context import CMContext
    from hybridmq.broker.cm.session import Session

READABLE_INTERNAL = (DMQ_DESTINATION, LOG_DESTINATION)
INTERNAL_TYPE = "internal"  # the type FETCH_META gives an MM's internal log partition
MM_TIMEOUT_S = 30.0
META_TIMEOUT_S = 10.0


async def fetch_meta(cm: CMContext, session: Session, frame: dict[str, Any]) -> None:
    try:
        await _fetch_meta(cm, session, frame)
    except (KeyError, ValueError, TypeError) as exc:
        session.conn.reply_error(frame, ErrorCode.INVALID_REQUEST, f"bad fetch_meta: {exc!r}")


def _primary_link(
    cm: CMContext, session: Session, frame: Decoded, name: str, internal: bool
) -> tuple[Any, int] | None:
    """The link to partition ``name``'s primary MM and the partition epoch; None once ``frame`` was
    answered with the error (UNKNOWN_PARTITION, MM_UNAVAILABLE)."""
    owner = _internal_owner(cm, name) if internal else None
    try:
        route = cm.routes.primary(name, internal_owner=owner)
    except Unroutable as exc:
        session.conn.reply_error(frame, exc.code, exc.msg)
        return None
    return route.conn, route.epoch


async def reader_commit(cm: CMContext, session: Session, frame: ReaderCommit) -> None:
    route = _primary_link(cm, session, frame, frame.partition, False)
    if route is None:
        return
    conn, epoch = route
    frame.partition_epoch = epoch
    request = msgspec.structs.replace(frame, c=None)  # the link numbers its own request
    try:
        reply = await conn.request(request, timeout=MM_TIMEOUT_S)
    except RemoteError as exc:
        session.conn.reply_error(frame, ErrorCode(exc.code), exc.msg)
        return
    except Exception as exc:  # the link went away or the MM did not answer in time
        session.conn.reply_error(frame, ErrorCode.MM_UNAVAILABLE, f"primary of {frame.partition}: {exc!r}")
        return
    reply.pop("c", None)
    session.conn.reply(frame, reply)


async def fetch(cm: CMContext, session: Session, frame: Fetch) -> None:
    name = frame.partition
    route = _primary_link(cm, session, frame, name, frame.internal)
    if route is None:
        return
    conn, epoch = route
    request = Fetch(
        partition=name, offset=frame.offset, end=frame.end, max_bytes=frame.max_bytes, partition_epoch=epoch
    )
    try:
        reply = await conn.request(request, timeout=MM_TIMEOUT_S)
    except RemoteError as exc:
        err = error_frame(ErrorCode(exc.code), exc.msg, frame.c)
        for key in ("start", "hw"):
            if key in exc.details:
                err[key] = exc.details[key]
        if not session.conn.closed:
            session.conn.send_nowait(err)
        return
    except Exception as exc:  # the link went away or the MM did not answer in time
        session.conn.reply_error(frame, ErrorCode.MM_UNAVAILABLE, f"primary of {name}: {exc!r}")
        return
    reply["batches"] = visible_batches(cm, session.user, reply.get("batches") or [], frame.internal)
    reply.pop("c", None)
    session.conn.reply(frame, reply)
    await session.conn.drain()


def visible_batches(
    cm: CMContext, user: str, batches: list[dict[str, Any]], internal: bool
) -> list[dict[str, Any]]:
    """Replace the batches this user may not see by stubs that keep only ``o`` and ``n``."""
    verdicts: dict[str, str | None] = {}
    out = []
    for batch in batches:
        if batch.get("ctl"):
            out.append(batch)
            continue
        dest = str(batch.get("d", ""))
        if dest not in verdicts:
            reason: str | None = None
            if is_reserved(dest) and not (internal and dest in READABLE_INTERNAL):
                reason = "internal"
            elif not cm.acl.allowed(user, "consume", dest):
                reason = "acl"
            verdicts[dest] = reason
        reason = verdicts[dest]
        if reason is None:
            out.append(batch)
        else:
            out.append({"o": batch["o"], "n": batch["n"], "ctl": True, "skip": reason})
    return out


async def _fetch_meta(cm: CMContext, session: Session, frame: dict[str, Any]) -> None:
    table = cm.source.partitions()
    names = frame.get("p")
    pids = [int(pid) for pid in frame.get("pids") or []]
    chosen = [table[n] for n in names if n in table] if names is not None else list(table.values())
    by_mm: dict[str, list[str]] = {}
    for a in chosen:
        by_mm.setdefault(a.primary or "", []).append(a.name)
    internal: list[tuple[str, str]] = []  # (name, MM) of the MMs' internal log partitions
    if frame.get("i"):
        for mm in sorted(_mm_names(cm)):
            name = log_partition(mm)
            if names is None or name in names:
                internal.append((name, mm))
                by_mm.setdefault(mm, []).append(name)

    async def ask(mm: str, wanted: list[str]) -> tuple[str, dict[str, Any] | str]:
        route = cm.routes.to(mm, 0)
        if route is None:
            return mm, ErrorCode.MM_UNAVAILABLE.name
        conn = route.conn
        try:
            request: dict[str, Any] = {"t": FrameType.FETCH_META, "p": wanted}
            if pids:
                request["pids"] = pids
            reply = await conn.request(request, timeout=META_TIMEOUT_S)
        except Exception:
            return mm, ErrorCode.MM_UNAVAILABLE.name
        return mm, dict(reply.get("partitions") or {})

    answers = dict(await asyncio.gather(*(ask(mm, wanted) for mm, wanted in by_mm.items())))
    partitions = []
    for a in sorted(chosen, key=lambda p: p.name):
        entry: dict[str, Any] = {
            "name": a.name,
            "type": str(a.type),
            "primary": a.primary,
            "epoch": a.epoch,
            "writable": a.writable,
        }
        answer = answers.get(a.primary or "")
        if isinstance(answer, dict) and a.name in answer:
            meta = answer[a.name]
            entry.update(start=meta["start"], hw=meta["hw"], end=meta["end"])
            if meta.get("inc") is not None:
                entry["incarnation"] = str(meta["inc"])
            if pids and int(meta.get("epoch", -1)) >= a.epoch:
                entry["producers"] = meta.get("producers") or {}
            elif pids:  # not (yet) the primary of the table's epoch: its producer state may lag
                entry["err"] = ErrorCode.NOT_PRIMARY.name
        else:
            entry["err"] = answer if isinstance(answer, str) else ErrorCode.NOT_PRIMARY.name
        partitions.append(entry)
    for name, mm in internal:
        answer = answers.get(mm)
        if not (isinstance(answer, dict) and name in answer):
            continue  # its MM is down: its events are unreadable until it is back, not an error
        meta = answer[name]
        partitions.append(
            {
                "name": name,
                "type": INTERNAL_TYPE,
                "primary": mm,
                "epoch": 0,
                "writable": False,
                "start": meta["start"],
                "hw": meta["hw"],
                "end": meta["end"],
            }
        )
    session.conn.reply(frame, {"t": FrameType.OK, "partitions": partitions})


def _mm_names(cm: CMContext) -> set[str]:
    return {b.name for b in cm.source.message_managers()}


def _internal_owner(cm: CMContext, name: str) -> str | None:
    """The MM whose internal log partition ``name`` is (None: not one, or no such MM)."""
    owner = log_partition_owner(name)
    return owner if owner is not None and owner in _mm_names(cm) else None
