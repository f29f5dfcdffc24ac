"""Publishing a takeover marker to every subscriber of a topic.

A MARKER request ``{c, d (topic), id (marker id), v (optional value bytes)}`` makes the CM append one
record to **every writable partition** (through each partition's primary MM, like a PRODUCE with the
partition epoch). Every subscription of the topic - durable or not, on any partition - therefore sees
the marker after everything published to that partition before it. The reply says which partitions
got it (``partitions``) and which did not (``failed``: partition -> reason); the affinity consumer
waits for the marker in exactly the partitions that got it.

The record is ``[value, None, {MARKER_HEADER: id}, now_ms]``, so consumers recognise it by header.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import msgpack

from hybridmq.api.frames import FrameType
from hybridmq.broker.assignment_source import AssignmentSource
from hybridmq.broker.routing import Link, Routes
from hybridmq.protocol.deadline import within

MARKER_HEADER = "hybridmq-affinity-marker"


def marker_blob(marker_id: str, value: bytes = b"") -> bytes:
    record = [value, None, {MARKER_HEADER: marker_id}, int(time.time() * 1000)]
    return bytes(msgpack.packb([record], use_bin_type=True))


async def publish_marker(
    source: AssignmentSource,
    routes: Routes[Link],
    topic: str,
    marker_id: str,
    value: bytes = b"",
    timeout_s: float = 10.0,
) -> tuple[list[str], dict[str, str]]:
    """Append the marker to every writable partition; returns (partitions, failed)."""
    blob = marker_blob(marker_id, value)
    names: list[str] = []
    futs: list[Any] = []
    failed: dict[str, str] = {}
    for a in source.partitions().values():
        if not a.writable:
            continue
        route = routes.to(a.primary, a.epoch, a)
        if route is None:
            failed[a.name] = "primary unavailable"
            continue
        frame = {"t": FrameType.PRODUCE, "p": a.name, "d": topic, "n": 1, "b": blob, "f": 0, "x": 0}
        frame["e"] = route.epoch
        names.append(a.name)
        futs.append(within(route.conn.request_nowait(frame), timeout_s))
    results = await asyncio.gather(*futs, return_exceptions=True)
    ok = []
    for name, r in zip(names, results, strict=True):
        if isinstance(r, BaseException):
            failed[name] = f"{type(r).__name__}: {r}"
        else:
            ok.append(name)
    return sorted(ok), failed
