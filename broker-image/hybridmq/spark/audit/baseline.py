"""The same audit on one machine: record by record in plain Python (a test oracle and the historic
baseline), and vectorized with numpy (the single-machine speed limit the Spark job is held to).

Both read an exported log with pyarrow; neither shares code with the Spark job's kernels.
"""

import csv
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

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


def vectorized_audit(export_dir: str, first_sequence: int | None = None) -> dict[str, Any]:
    """The same counts (records, producers, missing, duplicates, order violations) with numpy on one
    thread: what a single machine does at best, the yardstick for the Spark job's speed.

    Per partition, records are grouped by producer with a stable (radix) sort that keeps offset
    order, so order violations are backward steps inside a group; then one ``bincount`` over every
    producer's sequence range counts distinct sequences, from which duplicates and gaps follow.
    """
    source = ExportedLogSource(export_dir)
    codes: dict[str, int] = {}
    groups_p: list[np.ndarray] = []  # per (partition, producer) group: producer code, min, max
    groups_lo: list[np.ndarray] = []
    groups_hi: list[np.ndarray] = []
    all_p: list[np.ndarray] = []
    all_s: list[np.ndarray] = []
    order_violations = 0
    for info in source.list_partitions():
        prod_parts: list[np.ndarray] = []
        seq_parts: list[np.ndarray] = []
        for batch in source.read_range(info.name, info.start, info.end, ("producer_id", "sequence"), True):
            producer, sequence = batch.column(0), batch.column(1)
            if producer.null_count or sequence.null_count:
                valid = pc.and_(pc.is_valid(producer), pc.is_valid(sequence))
                producer, sequence = producer.filter(valid), sequence.filter(valid)
            if not isinstance(producer, pa.DictionaryArray):
                producer = pc.dictionary_encode(producer)
            mapping = np.array([codes.setdefault(n, len(codes)) for n in producer.dictionary.to_pylist()])
            indices = producer.indices.to_numpy(zero_copy_only=False)
            prod_parts.append(mapping[indices] if len(mapping) else indices.astype(np.int64))
            seq_parts.append(sequence.to_numpy().astype(np.int64, copy=False))
        if not prod_parts:
            continue
        prod = np.concatenate(prod_parts).astype(np.int16 if len(codes) < 2**15 else np.int32)
        seq = np.concatenate(seq_parts)
        order = np.argsort(prod, kind="stable")
        prod, seq = prod[order], seq[order]
        same = prod[1:] == prod[:-1]
        if info.type == "fixed":
            order_violations += int(np.count_nonzero(same & (seq[1:] <= seq[:-1])))
        starts = np.flatnonzero(np.concatenate(([True], ~same)))
        groups_p.append(prod[starts])
        groups_lo.append(np.minimum.reduceat(seq, starts))
        groups_hi.append(np.maximum.reduceat(seq, starts))
        all_p.append(prod)
        all_s.append(seq)
    if not all_p:
        return {"records": 0, "producers": 0, "missing": 0, "duplicates": 0, "order_violations": 0}
    n_prod = len(codes)
    g_p = np.concatenate(groups_p)
    lo = np.full(n_prod, np.iinfo(np.int64).max)
    hi = np.full(n_prod, np.iinfo(np.int64).min)
    np.minimum.at(lo, g_p, np.concatenate(groups_lo))  # one entry per group: cheap
    np.maximum.at(hi, g_p, np.concatenate(groups_hi))
    span = hi - lo + 1
    base = np.concatenate(([0], np.cumsum(span)[:-1]))
    prod = np.concatenate(all_p)
    present = np.bincount(base[prod] + np.concatenate(all_s) - lo[prod], minlength=int(span.sum())) > 0
    distinct = np.add.reduceat(present, base, dtype=np.int64)
    records = len(prod)
    missing = int(np.sum(span - distinct))
    if first_sequence is not None:
        missing += int(np.sum(np.maximum(0, lo - first_sequence)))
    return {
        "records": records,
        "producers": n_prod,
        "missing": missing,
        "duplicates": int(records - distinct.sum()),
        "order_violations": order_violations,
    }
