"""FETCH / FETCH_META on the MM: read stored batches of a hosted partition by offset.

The read side of the fetch-by-offset API (the PySpark data source and the audit read
partitions of a live cluster). The CM routes a client's FETCH to the partition's primary with the
partition epoch (``pe``); this module answers it from the partition log:

* only records below the high watermark (``PartitionStorage.high_watermark``: flushed and, with
  replication, committed) are returned, and never at or past the requested exclusive end ``e``;
* whole stored batches, the first one possibly starting below ``o`` (readers skip those records);
  at most ``mb`` bytes of batches (capped by the frame size) but always at least one batch, so that
  a reader progresses;
* ``o`` below the log start (retention removed it) is ``OFFSET_OUT_OF_RANGE`` with ``start`` and
  ``hw`` in the ERROR frame; ``o`` at or past the high watermark is an empty reply.

Batches are sent as maps: ``o`` base offset, ``n`` record count, ``d`` destination, ``pid`` /
``pep`` / ``seq`` producer id / producer epoch / base sequence (-1 / 0 / -1 without idempotence),
``ts`` the batch's max timestamp, ``ctl`` control batch (cursor snapshots: sent without payload),
``f`` flags, ``xa`` extra attributes, ``b`` the producer's records blob (never decoded here).

FETCH_META answers ``{name: {start, hw, end, epoch, inc}}`` for the hosted partitions this MM is
primary of (``p`` narrows it to some names); ``inc`` is the partition's incarnation
(``mm/incarnation.py``; absent for the MM's internal log partition). With ``pids`` (producer
ids) each entry also has ``producers`` (``producer_states``): what the partition stores of those
producers, so that an on-demand producer that moves after a failover resends only what the old
partition lacks; the answer detaches those producer ids from the partition (``mm/attached.py``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from hybridmq.api.frames import ErrorCode, FrameType, error_frame
from hybridmq.api.requests import Fetch
from hybridmq.broker.destinations.batch_payload import unpack_payload
from hybridmq.broker.log.batch import HEADER_SIZE, iter_batches
from hybridmq.broker.log.errors import LogError
from hybridmq.broker.mm.hosted import NotPrimaryHere
from hybridmq.protocol import Connection

if TYPE_CHECKING:
    from hybridmq.broker.mm.context import MMContext
    from hybridmq.broker.mm.partition import PartitionHost

log = logging.getLogger(__name__)

DEFAULT_FETCH_BYTES = 4 * 1024 * 1024
FRAME_MARGIN = 256 * 1024  # room for the reply's own fields within the maximum frame size
BATCH_OVERHEAD = 96  # msgpack map keys and small values of one batch entry


def partition_meta(host: PartitionHost) -> dict[str, int]:
    return {
        "start": host.storage.start_offset,
        "hw": host.storage.high_watermark,
        "end": host.storage.end_offset,
        "epoch": host.epoch,
    }


def producer_states(host: PartitionHost, pids: list[Any]) -> dict[str, list[Any]]:
    """``{str(pid): [producer epoch, last stored sequence, [[first seq, last seq, base offset, last
    offset], ...]]}`` from the partition log's (replicated) producer-sequence table; unknown pids are
    left out (nothing of theirs is stored)."""
    state = host.storage.log.producer_state
    out: dict[str, list[Any]] = {}
    for pid in pids:
        entry = state.get(int(pid))
        if entry is not None:
            out[str(int(pid))] = [
                entry.producer_epoch,
                entry.last_sequence,
                [[b.first_sequence, b.last_sequence, b.base_offset, b.last_offset] for b in entry.batches],
            ]
    return out


def handle_meta(mm: MMContext, conn: Connection, frame: dict[str, Any]) -> None:
    """Answer a FETCH_META frame from a CM."""
    names = frame.get("p")
    wanted = None if names is None else {str(n) for n in names}
    pids = frame.get("pids")
    partitions: dict[str, dict[str, Any]] = {}
    for name, host in mm.hosted.items():
        if host.serving and (wanted is None or name in wanted):
            partitions[name] = meta = dict[str, Any](partition_meta(host))
            inc = mm.replica_manager.incarnation(name)
            if inc is not None:
                meta["inc"] = inc
            if pids:
                meta["producers"] = producer_states(host, list(pids))
                # A moving producer asks before resending elsewhere: once answered, it is gone.
                host.producers.detached(int(pid) for pid in pids)
    conn.reply(frame, {"t": FrameType.OK, "node": mm.config.name, "partitions": partitions})


def handle_fetch(mm: MMContext, conn: Connection, frame: Fetch) -> None:
    """Answer a FETCH frame from a CM."""
    reply = fetch(mm, frame)
    if not conn.closed:
        conn.send_nowait(reply)


def primary_host(mm: MMContext, name: str, epoch: int | None, corr: Any) -> PartitionHost | dict[str, Any]:
    """The host of ``name`` if this MM is its primary at ``epoch``, the one the CM routed with
    (None: any); else the NOT_PRIMARY error frame to answer ``corr`` with."""
    try:
        return mm.hosted.primary(name, epoch)
    except NotPrimaryHere as exc:
        return error_frame(ErrorCode.NOT_PRIMARY, str(exc), corr)


def fetch(mm: MMContext, frame: Fetch) -> dict[str, Any]:
    corr = frame.c
    name = frame.partition
    host = primary_host(mm, name, frame.partition_epoch, corr)
    if isinstance(host, dict):
        return host
    offset = frame.offset
    start = host.storage.start_offset
    hw = host.storage.high_watermark
    if offset < start:
        err = error_frame(ErrorCode.OFFSET_OUT_OF_RANGE, f"{name}: offset {offset} < log start {start}", corr)
        err.update(start=start, hw=hw)
        return err
    limit = hw if frame.end is None else min(frame.end, hw)
    budget = min(frame.max_bytes or DEFAULT_FETCH_BYTES, max(mm.config.max_frame - FRAME_MARGIN, 1))
    try:
        batches = read_batches(host, offset, limit, budget)
    except LogError as exc:
        return error_frame(ErrorCode.MM_UNAVAILABLE, f"{name}: read failed: {exc}", corr)
    return {"t": FrameType.OK, "r": corr, "p": name, "start": start, "hw": hw, "batches": batches}


def read_batches(host: PartitionHost, offset: int, limit: int, budget: int) -> list[dict[str, Any]]:
    """Whole batches holding offsets ``[offset, limit)``, about ``budget`` bytes (at least one)."""
    out: list[dict[str, Any]] = []
    used = 0
    pos = offset
    log_ = host.storage.log
    while pos < limit and used < budget:
        raw = log_.read(pos, budget - used, max_offset=limit)
        if not raw:
            break
        for header, payload in iter_batches(raw):
            size = header.length + BATCH_OVERHEAD
            if out and used + size > budget:
                return out
            used += size
            pos = header.next_offset
            entry: dict[str, Any] = {
                "o": header.base_offset,
                "n": header.record_count,
                "pid": header.producer_id,
                "pep": header.producer_epoch,
                "seq": header.base_sequence,
                "ts": header.max_timestamp,
            }
            if header.is_control:
                entry["ctl"] = True
                used -= header.length - HEADER_SIZE  # the payload is not sent
            else:
                dest, flags, expiry, extra, blob = unpack_payload(payload)
                entry.update(ctl=False, d=dest, f=flags, x=expiry, xa=extra, b=blob)
            out.append(entry)
    return out
