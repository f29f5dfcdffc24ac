"""Opening a partition log: its files, crash recovery and producer state (Kafka's LogLoader).

Files in the partition directory::

    00000000000000000000.log        segment, named by the offset of its first record
    00000000000000000000.index      sparse offset index of a sealed segment (rebuildable)
    00000000000000001000.snapshot   producer state as of offset 1000 (written at each roll)
    leader-epoch-checkpoint         epoch -> start offset
    recovery-point                  every segment below this base offset was fsynced and sealed

Segments below the recovery point are trusted (headers read, no CRC scan); the others are scanned
and a torn tail is cut. A gap after a cut drops every later segment. What survives is fsynced and
becomes the durable prefix.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from .batch import BatchHeader
from .checkpoint import fsync_dir, read_recovery_point, write_recovery_point
from .config import LogConfig
from .epoch_cache import LeaderEpochCache
from .producer_state import ProducerStateManager, delete_snapshots, load_latest_snapshot
from .recovery import load_trusted_segment, recover_segment
from .segment import Segment, TouchFn, headers_between, list_segment_bases

EPOCH_FILE = "leader-epoch-checkpoint"


class RecoveryReport(NamedTuple):
    segments_scanned: int
    bytes_truncated: int
    segments_deleted: int


@dataclass(slots=True)
class LoadedLog:
    """What :func:`load_log` found: the segments (the last one active), the epoch cache."""

    segments: list[Segment]
    epochs: LeaderEpochCache
    recovery: RecoveryReport
    created: bool  # a new, empty log: its directory entries are not fsynced yet


def rebuild_producer_state(
    path: Path,
    producers: ProducerStateManager,
    segments: Sequence[Segment],
    end: int,
    touch: TouchFn | None = None,
) -> None:
    """The producer state as of ``end``: the newest snapshot at or below it, then the batches after."""
    delete_snapshots(path, above=end)
    snapshot = load_latest_snapshot(path, producers, end)
    log_start = segments[0].base_offset
    start = log_start if snapshot is None else snapshot
    for header in headers_between(segments, max(start, log_start), end, touch):
        if header.base_offset >= start:
            producers.update(header)


def load_log(path: Path, config: LogConfig, producers: ProducerStateManager) -> LoadedLog:
    """Open (creating if needed) the log in ``path`` and recover it after a crash; fills ``producers``."""
    path.mkdir(parents=True, exist_ok=True)
    for name in os.listdir(path):
        if name.endswith(".tmp"):
            (path / name).unlink()
    fsync = config.fsync != "never"
    try:
        epochs = LeaderEpochCache(path / EPOCH_FILE, fsync=fsync)
    except (ValueError, OSError):
        (path / EPOCH_FILE).unlink()
        epochs = LeaderEpochCache(path / EPOCH_FILE, fsync=fsync)
    bases = list_segment_bases(path)
    if not bases:
        epochs.clear()
        loaded = LoadedLog(
            [Segment(path, 0, config.index_interval_bytes)], epochs, RecoveryReport(0, 0, 0), True
        )
        write_recovery_point(path, 0, fsync=fsync)
        return loaded
    recovery_point = read_recovery_point(path)
    # Producer state: the newest snapshot, then the batches after it (checked below in case the
    # crash took records the snapshot had seen).
    snapshot_offset = load_latest_snapshot(path, producers, 1 << 62)
    replay_from = bases[0] if snapshot_offset is None else snapshot_offset

    def on_batch(header: BatchHeader) -> None:
        if header.base_offset >= replay_from:
            producers.update(header)
        if header.epoch > epochs.latest_epoch:
            epochs.assign(header.epoch, header.base_offset)

    scanned = truncated = deleted = 0
    segments: list[Segment] = []
    for i, base in enumerate(bases):
        segment = Segment(path, base, config.index_interval_bytes)
        if segments and segments[-1].next_offset != base:
            # A gap: an earlier segment lost its tail, so later ones cannot be kept.
            for base_to_drop in bases[i:]:
                Segment(path, base_to_drop, config.index_interval_bytes).delete()
                deleted += 1
            segment.close()
            break
        next_base = bases[i + 1] if i + 1 < len(bases) else None
        callback = on_batch if (next_base is None or next_base > replay_from) else None
        if next_base is not None and next_base <= recovery_point:
            load_trusted_segment(segment, max_batch_bytes=config.max_batch_bytes, on_batch=callback)
        else:
            scanned += 1
            truncated += recover_segment(segment, max_batch_bytes=config.max_batch_bytes, on_batch=callback)
        segments.append(segment)
    end = segments[-1].next_offset
    epochs.truncate_from_end(end)
    epochs.truncate_from_start(segments[0].base_offset)
    if snapshot_offset is not None and snapshot_offset > end:
        rebuild_producer_state(path, producers, segments, end)  # the snapshot saw records the crash took
    delete_snapshots(path, above=end)
    # What survived is durable from now on (after kill -9 it may still be only in the page
    # cache). The active segment will take new, unsynced data: scan it after the next crash.
    if fsync:
        for segment in segments:
            if segment.base_offset >= recovery_point or segment is segments[-1]:
                segment.fsync()
        fsync_dir(path)
    write_recovery_point(path, segments[-1].base_offset, fsync=fsync)
    for segment in segments[:-1]:
        segment.release()  # reopened on demand
    return LoadedLog(segments, epochs, RecoveryReport(scanned, truncated, deleted), False)
