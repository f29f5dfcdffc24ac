"""Exported logs: the on-disk format and the :class:`PartitionSource` that reads it.

Format (version 1), one directory::

    <root>/_hybridmq_export.json          {"format": "hybridmq-export", "version": 1}
    <root>/<quoted partition name>/       urllib.parse.quote(name, safe="")
        _partition.json                   {"name": "...", "type": "fixed" | "on-demand",
                                           "incarnation": "<random id, new on each creation>"}
        <base:020d>-<end:020d>.arrow      Arrow IPC *file* with the row columns (schema.COLUMNS,
                                          in that order), records at offsets in [base, end) in
                                          increasing offset order, record batches <= 64Ki rows,
                                          each with statistics in its custom metadata:
                                          ``hybridmq.min.<column>`` / ``hybridmq.max.<column>``
                                          (decimal text) for ``offset`` and ``sequence``, the
                                          smallest and largest non-null value (absent when all
                                          are null, and in exports written before them)

Column types are those of ``schema.ROW_SCHEMA``, except that the string columns ``partition``,
``partition_type``, ``destination`` and ``producer_id`` may be stored dictionary-encoded
(``dictionary<int32, string>``, one dictionary per file: :mod:`hybridmq.spark.export` does so).
Readers decode them, so a reader's batches have exactly the row schema.

A segment is written under a dot-prefixed temporary name and renamed into place, so a reader sees
whole segments only (dot files are ignored). The log start of a partition is the base of its first
segment and its end the end of its last; an empty partition has start = end = 0. A partition that is
garbage collected disappears as a whole directory; trimming deletes whole leading segments.
Offsets inside a segment may have holes (control records); the names bound them.
A partition deleted and re-created under the same name gets a new ``incarnation`` (exports written
before it existed: the inode and modification time of ``_partition.json`` stand in for it).
"""

import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pyarrow as pa

from hybridmq.spark.headers import from_string_map
from hybridmq.spark.schema import ROW_SCHEMA, arrow_schema
from hybridmq.spark.source import DataLossError, PartitionGoneError, PartitionInfo

FORMAT_NAME = "hybridmq-export"
FORMAT_VERSION = 1
MARKER_FILE = "_hybridmq_export.json"
PARTITION_FILE = "_partition.json"
SEGMENT_SUFFIX = ".arrow"
MAX_BATCH_ROWS = 65536
# Per record batch min/max (custom metadata), so that a scan skips batches no row of which can match.
STATISTICS_COLUMNS = ("offset", "sequence")
STATISTICS_PREFIX = "hybridmq."
DICTIONARY_COLUMNS = frozenset({"partition", "partition_type", "destination", "producer_id"})
STORED_SCHEMA = pa.schema(
    [
        pa.field(f.name, pa.dictionary(pa.int32(), pa.string())) if f.name in DICTIONARY_COLUMNS else f
        for f in ROW_SCHEMA
    ]
)


def partition_dir(root: Path, name: str) -> Path:
    return root / quote(name, safe="")


def segment_name(base: int, end: int) -> str:
    return f"{base:020d}-{end:020d}{SEGMENT_SUFFIX}"


@dataclass(frozen=True)
class Segment:
    base: int
    end: int
    path: Path


def list_segments(pdir: Path) -> list[Segment]:
    """The segments of one partition directory in offset order (FileNotFoundError if it is gone)."""
    segments: list[Segment] = []
    for entry in os.scandir(pdir):
        name = entry.name
        if name.startswith(".") or not name.endswith(SEGMENT_SUFFIX):
            continue
        base_s, _, end_s = name[: -len(SEGMENT_SUFFIX)].partition("-")
        segments.append(Segment(int(base_s), int(end_s), Path(entry.path)))
    segments.sort(key=lambda s: s.base)
    return segments


def read_partition_meta(pdir: Path) -> tuple[str, str, str]:
    """``(name, type, incarnation)`` of a partition directory (FileNotFoundError if it is gone)."""
    path = pdir / PARTITION_FILE
    meta = json.loads(path.read_text())
    incarnation = meta.get("incarnation")
    if not incarnation:
        stat = path.stat()
        incarnation = f"file-{stat.st_ino}-{stat.st_mtime_ns}"
    return str(meta["name"]), str(meta["type"]), str(incarnation)


def decoded(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The batch with dictionary-encoded columns decoded (the exact row schema types)."""
    if not any(pa.types.is_dictionary(f.type) or pa.types.is_map(f.type) for f in batch.schema):
        return batch
    arrays = [_decoded(c) for c in batch.columns]
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema(batch.schema.names))


def _decoded(column: pa.Array) -> pa.Array:
    if pa.types.is_dictionary(column.type):
        return column.dictionary_decode()
    if pa.types.is_map(column.type):  # headers of an export written before they were binary
        return from_string_map(column)
    return column


class ExportedLogSource:
    """Reads an exported log directory. Cheap to build; keeps no file open between calls."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        marker = self.root / MARKER_FILE
        if not marker.is_file():
            raise FileNotFoundError(f"{self.root} is not a hybridmq exported log (no {MARKER_FILE})")
        meta = json.loads(marker.read_text())
        if meta.get("format") != FORMAT_NAME or int(meta.get("version", 0)) > FORMAT_VERSION:
            raise ValueError(f"{marker}: unsupported export format {meta}")

    def list_partitions(self) -> list[PartitionInfo]:
        found: list[PartitionInfo] = []
        for entry in os.scandir(self.root):
            if not entry.is_dir() or entry.name.startswith("."):
                continue
            pdir = Path(entry.path)
            try:
                name, ptype, incarnation = read_partition_meta(pdir)
                segments = list_segments(pdir)
            except FileNotFoundError:
                continue  # being created or just garbage collected
            if segments:
                found.append(PartitionInfo(name, ptype, segments[0].base, segments[-1].end, incarnation))
            else:
                found.append(PartitionInfo(name, ptype, 0, 0, incarnation))
        found.sort(key=lambda p: p.name)
        return found

    def read_range(
        self,
        partition: str,
        start: int,
        end: int,
        columns: Sequence[str],
        dictionaries: bool = False,
    ) -> Iterator[pa.RecordBatch]:
        pdir = partition_dir(self.root, partition)
        try:
            segments = list_segments(pdir)
        except FileNotFoundError:
            raise PartitionGoneError(partition) from None
        if not segments and not (pdir / PARTITION_FILE).exists():
            raise PartitionGoneError(partition)
        log_start = segments[0].base if segments else 0
        if start < log_start and end > start:
            raise DataLossError(partition, start, log_start)
        return self._iter_range(partition, segments, start, end, columns, dictionaries)

    def _iter_range(
        self,
        partition: str,
        segments: list[Segment],
        start: int,
        end: int,
        columns: Sequence[str],
        dictionaries: bool,
    ) -> Iterator[pa.RecordBatch]:
        for seg in segments:
            if seg.end <= start or seg.base >= end:
                continue
            try:
                source = pa.memory_map(str(seg.path), "r")
            except FileNotFoundError:
                raise PartitionGoneError(partition) from None
            with source:
                reader = pa.ipc.open_file(source)
                for i in range(reader.num_record_batches):
                    batch = reader.get_batch(i)
                    if batch.num_rows == 0:
                        continue
                    offsets = batch.column("offset").to_numpy()
                    if offsets[0] >= end or offsets[-1] < start:
                        continue
                    lo = int(np.searchsorted(offsets, start, side="left"))
                    hi = int(np.searchsorted(offsets, end, side="left"))
                    if hi > lo:
                        part = batch.slice(lo, hi - lo).select(list(columns))
                        yield part if dictionaries else decoded(part)

    def close(self) -> None:
        pass
