"""The same audit in plain Python, record by record: the benchmark's baseline and a test oracle.

Reads an exported log with pyarrow (columns to Python lists) and checks with dicts and sets.
"""

import csv
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from hybridmq.spark.exported import ExportedLogSource
from hybridmq.spark.schema import AUDIT_COLUMNS


def _strings(column: pa.Array) -> list[Any]:
    """Python strings of a column; a dictionary column shares one str object per distinct value."""
    if isinstance(column, pa.DictionaryArray):
        names = column.dictionary.to_pylist()
        return [None if i is None else names[i] for i in column.indices.to_pylist()]
    return column.to_pylist()


def send_log_files(paths: Sequence[str]) -> list[Path]:
    files: list[Path] = []
    for path in map(Path, paths):
        files.extend(sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path])
    return files


def baseline_audit(
    export_dir: str, send_logs: Sequence[str] = (), first_sequence: int | None = None
) -> dict[str, Any]:
    source = ExportedLogSource(export_dir)
    last: dict[tuple[str, str], int] = {}
    seen: dict[str, set[int]] = {}
    records = duplicates = order_violations = 0
    for info in source.list_partitions():
        fixed = info.type == "fixed"
        for batch in source.read_range(info.name, info.start, info.end, AUDIT_COLUMNS, dictionaries=True):
            producers = _strings(batch.column("producer_id"))
            sequences = batch.column("sequence").to_pylist()
            for producer, seq in zip(producers, sequences, strict=True):
                if producer is None or seq is None:
                    continue
                records += 1
                if fixed:
                    key = (info.name, producer)
                    prev = last.get(key)
                    if prev is not None and seq <= prev:
                        order_violations += 1
                    last[key] = seq
                got = seen.get(producer)
                if got is None:
                    got = seen[producer] = set()
                if seq in got:
                    duplicates += 1
                else:
                    got.add(seq)
    missing = 0
    for got in seen.values():
        low = min(got)
        missing += max(got) - low + 1 - len(got)
        if first_sequence is not None and low > first_sequence:
            missing += low - first_sequence
    acked: dict[str, set[int]] = {}
    for file in send_log_files(send_logs):
        with file.open(newline="") as handle:
            for row in csv.reader(handle):
                if row and not row[0].startswith("#"):
                    acked.setdefault(row[0], set()).add(int(row[1]))
    acked_missing = sum(len(seqs - seen.get(producer, set())) for producer, seqs in acked.items())
    return {
        "records": records,
        "producers": len(seen | {p: set() for p in acked}),
        "missing": missing,
        "duplicates": duplicates,
        "order_violations": order_violations,
        "acked": sum(len(s) for s in acked.values()),
        "acked_missing": acked_missing,
    }
