"""Write exported logs (the format is described in :mod:`hybridmq.spark.exported`).

From Python rows or Arrow tables (tests, benchmarks, tools) with :class:`ExportWriter`, or from any
:class:`~hybridmq.spark.source.PartitionSource` (a running cluster) with :func:`export_source`.
``python -m hybridmq.spark.export --bootstrap HOST:PORT OUT_DIR`` exports a cluster.
"""

import argparse
import json
import os
import shutil
import sys
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from hybridmq.spark.exported import (
    DICTIONARY_COLUMNS,
    FORMAT_NAME,
    FORMAT_VERSION,
    MARKER_FILE,
    MAX_BATCH_ROWS,
    PARTITION_FILE,
    STATISTICS_COLUMNS,
    STATISTICS_PREFIX,
    STORED_SCHEMA,
    list_segments,
    partition_dir,
    segment_name,
)
from hybridmq.spark.headers import header_rows
from hybridmq.spark.schema import COLUMNS, ROW_SCHEMA
from hybridmq.spark.source import PartitionSource


def constant_strings(value: str, n: int) -> pa.DictionaryArray:
    """A dictionary-encoded string column holding ``value`` ``n`` times."""
    indices = pa.array(np.zeros(n, dtype=np.int32))
    return pa.DictionaryArray.from_arrays(indices, pa.array([value], pa.string()))


def dictionary_strings(column: pa.ChunkedArray) -> pa.DictionaryArray:
    """One dictionary-encoded array (one dictionary, as an IPC file needs) of a string column."""
    encoded = pc.dictionary_encode(column.cast(pa.string()).combine_chunks())
    assert isinstance(encoded, pa.DictionaryArray)
    return encoded


def batch_statistics(batch: pa.RecordBatch) -> dict[str, str]:
    """The smallest and largest non-null value of each statistics column (none when all are null)."""
    stats: dict[str, str] = {}
    for column in STATISTICS_COLUMNS:
        bounds = pc.min_max(batch.column(column)).as_py()
        if bounds["min"] is not None:
            stats[f"{STATISTICS_PREFIX}min.{column}"] = str(bounds["min"])
            stats[f"{STATISTICS_PREFIX}max.{column}"] = str(bounds["max"])
    return stats


class ExportWriter:
    """Appends segments to an exported log directory (created if missing)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        marker = self.root / MARKER_FILE
        if not marker.exists():
            _atomic_write_text(marker, json.dumps({"format": FORMAT_NAME, "version": FORMAT_VERSION}))

    def create_partition(self, name: str, partition_type: str) -> Path:
        pdir = partition_dir(self.root, name)
        meta = pdir / PARTITION_FILE
        if not meta.exists():
            pdir.mkdir(parents=True, exist_ok=True)
            meta_json = {"name": name, "type": partition_type, "incarnation": uuid.uuid4().hex}
            _atomic_write_text(meta, json.dumps(meta_json))
        return pdir

    def end_offset(self, name: str) -> int:
        pdir = partition_dir(self.root, name)
        if not pdir.exists():
            return 0
        segments = list_segments(pdir)
        return segments[-1].end if segments else 0

    def append_table(
        self, name: str, partition_type: str, table: pa.Table | pa.RecordBatch
    ) -> tuple[int, int]:
        """Append one segment; returns its ``(base, end)``.

        ``table`` holds any subset of the row columns; ``partition`` and ``partition_type`` are
        filled in, ``offset`` is assigned after the current end when missing, other missing
        columns are null. Given offsets must increase strictly and start at or after the end.
        """
        if isinstance(table, pa.RecordBatch):
            table = pa.Table.from_batches([table])
        n = table.num_rows
        pdir = self.create_partition(name, partition_type)
        current_end = self.end_offset(name)
        if n == 0:
            return current_end, current_end
        if "offset" in table.column_names and table.column("offset").null_count == 0:
            offsets = table.column("offset").to_numpy().astype(np.int64, copy=False)
            if offsets[0] < current_end or (n > 1 and not bool(np.all(np.diff(offsets) > 0))):
                raise ValueError(f"offsets must increase strictly from {current_end} in {name}")
        else:
            offsets = np.arange(current_end, current_end + n, dtype=np.int64)
        arrays: list[pa.Array | pa.ChunkedArray] = []
        for field in ROW_SCHEMA:
            if field.name == "partition":
                arrays.append(constant_strings(name, n))
            elif field.name == "partition_type":
                arrays.append(constant_strings(partition_type, n))
            elif field.name == "offset":
                arrays.append(pa.array(offsets, pa.int64()))
            elif field.name in table.column_names and field.name in DICTIONARY_COLUMNS:
                arrays.append(dictionary_strings(table.column(field.name)))
            elif field.name in table.column_names:
                arrays.append(table.column(field.name).cast(field.type))
            else:
                arrays.append(pa.nulls(n, STORED_SCHEMA.field(field.name).type))
        full = pa.Table.from_arrays(arrays, schema=STORED_SCHEMA)
        base, end = int(offsets[0]), int(offsets[-1]) + 1
        final = pdir / segment_name(base, end)
        tmp = pdir / f".{final.name}.tmp"
        with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, STORED_SCHEMA) as writer:
            for batch in full.to_batches(max_chunksize=MAX_BATCH_ROWS):
                writer.write_batch(batch, custom_metadata=batch_statistics(batch))
        os.replace(tmp, final)
        return base, end

    def append_rows(
        self, name: str, partition_type: str, rows: Iterable[Mapping[str, Any]]
    ) -> tuple[int, int]:
        """Append Python rows (dicts keyed by column name; see :meth:`append_table`)."""
        rows = list(rows)
        present = [
            c for c in COLUMNS if c not in ("partition", "partition_type") and any(c in r for r in rows)
        ]
        columns = {c: [_py_value(c, r.get(c)) for r in rows] for c in present}
        table = pa.table(
            {c: pa.array(v, ROW_SCHEMA.field(c).type) for c, v in columns.items()}
            if rows
            else {"offset": pa.array([], pa.int64())}
        )
        return self.append_table(name, partition_type, table)

    def delete_partition(self, name: str) -> None:
        """Remove a partition as a whole, as garbage collection of an on-demand partition does."""
        shutil.rmtree(partition_dir(self.root, name), ignore_errors=True)

    def truncate_before(self, name: str, offset: int) -> int:
        """Delete the leading segments that end at or before ``offset``; returns the new log start."""
        segments = list_segments(partition_dir(self.root, name))
        for seg in segments:
            if seg.end <= offset and seg is not segments[-1]:
                seg.path.unlink()
        remaining = list_segments(partition_dir(self.root, name))
        return remaining[0].base if remaining else 0


def _py_value(column: str, value: Any) -> Any:
    if value is None:
        return None
    if column in ("key", "value") and isinstance(value, str):
        return value.encode()
    if column == "headers" and isinstance(value, Mapping):
        return header_rows(value)
    if column == "timestamp" and isinstance(value, int | float):
        return datetime.fromtimestamp(value, UTC)
    return value


def _atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def export_source(
    source: PartitionSource,
    root: str | os.PathLike[str],
    partitions: Sequence[str] | None = None,
) -> dict[str, tuple[int, int]]:
    """Copy every (or the named) partition of ``source`` into an exported log at ``root``.

    Returns ``{partition: (start, end)}`` of what was copied; a partition that vanishes meanwhile is
    skipped.
    """
    from hybridmq.spark.source import DataLossError, PartitionGoneError

    writer = ExportWriter(root)
    copied: dict[str, tuple[int, int]] = {}
    wanted = set(partitions) if partitions is not None else None
    for info in source.list_partitions():
        if wanted is not None and info.name not in wanted:
            continue
        writer.create_partition(info.name, info.type)
        start = max(info.start, writer.end_offset(info.name))
        try:
            batches = list(source.read_range(info.name, start, info.end, COLUMNS))
        except PartitionGoneError:
            writer.delete_partition(info.name)
            continue
        except DataLossError as err:
            start = err.available
            batches = list(source.read_range(info.name, start, info.end, COLUMNS))
        if batches:
            writer.append_table(info.name, info.type, pa.Table.from_batches(batches, schema=ROW_SCHEMA))
        copied[info.name] = (start, info.end)
    return copied


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hybridmq.spark.export", description=__doc__)
    parser.add_argument("out", help="exported log directory to write (appends to an existing one)")
    parser.add_argument("--bootstrap", required=True, help="host:port of a connection manager")
    parser.add_argument("--partition", action="append", help="only this partition (repeatable)")
    args = parser.parse_args(argv)
    from hybridmq.spark.source import open_source

    source = open_source({"bootstrap": args.bootstrap})
    try:
        copied = export_source(source, args.out, args.partition)
    finally:
        source.close()
    for name, (start, end) in sorted(copied.items()):
        print(f"{name} [{start}, {end})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
