"""Per-producer audit step: all findings of one producer in, one result row out.

Runs of present sequences from every partition and chunk are merged: sequences covered more than
once are duplicates, holes between the lowest and highest sequence are losses. Chunk edges of the
same fixed partition are stitched in offset order to catch reordering across chunk boundaries.
Acknowledged runs from send logs must be covered by present runs.
"""

import json
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from hybridmq.spark.audit.findings import RESULT_SCHEMA

MAX_SAMPLES = 20


def union_size(lo: np.ndarray, hi: np.ndarray) -> int:
    """Number of distinct integers covered by the closed intervals ``[lo, hi]``."""
    if len(lo) == 0:
        return 0
    order = np.argsort(lo, kind="stable")
    lo, hi = lo[order], hi[order]
    prev_max = np.concatenate(([np.iinfo(np.int64).min + 1], np.maximum.accumulate(hi)[:-1]))
    return int(np.sum(np.maximum(0, hi - np.maximum(lo - 1, prev_max))))


def merged(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted, disjoint, non-adjacent intervals covering the same integers."""
    if len(lo) == 0:
        return lo, hi
    order = np.argsort(lo, kind="stable")
    lo, hi = lo[order], hi[order]
    run_max = np.maximum.accumulate(hi)
    new = np.concatenate(([True], lo[1:] > run_max[:-1] + 1))
    starts = np.flatnonzero(new)
    ends = np.concatenate((starts[1:], [len(lo)])) - 1
    return lo[starts], run_max[ends]


def holes(lo: np.ndarray, hi: np.ndarray, limit: int) -> list[list[int]]:
    m_lo, m_hi = merged(lo, hi)
    return [[int(a) + 1, int(b) - 1] for a, b in zip(m_hi[:-1], m_lo[1:], strict=True)][:limit]


def uncovered(
    a_lo: np.ndarray, a_hi: np.ndarray, u_lo: np.ndarray, u_hi: np.ndarray, limit: int
) -> list[list[int]]:
    """Up to ``limit`` ranges of ``A`` not covered by ``U`` (both merged)."""
    out: list[list[int]] = []
    j = 0
    for lo, hi in zip(a_lo.tolist(), a_hi.tolist(), strict=True):
        cur = lo
        while j < len(u_lo) and u_hi[j] < cur:
            j += 1
        k = j
        while cur <= hi and len(out) < limit:
            if k >= len(u_lo) or u_lo[k] > hi:
                out.append([cur, hi])
                break
            if u_lo[k] > cur:
                out.append([cur, int(u_lo[k]) - 1])
            cur = int(u_hi[k]) + 1
            k += 1
        if len(out) >= limit:
            break
    return out


def _np(table: pa.Table, name: str) -> np.ndarray:
    return table.column(name).to_numpy().astype(np.int64, copy=False)


def audit_producer(table: pa.Table, first_sequence: int | None = None) -> dict[str, Any]:
    kind = table.column("kind")
    producer = table.column("producer_id")[0].as_py() if table.num_rows else None

    def rows(k: str) -> pa.Table:
        return table.filter(pc.equal(kind, k))

    iv, stat, edge, ack = rows("iv"), rows("stat"), rows("edge"), rows("ack")
    samples: list[dict[str, Any]] = []
    for k in ("order", "dup"):
        for r in rows(k).slice(0, MAX_SAMPLES).to_pylist():
            samples.append(
                {
                    "kind": k,
                    "partition": r["partition"],
                    "seq": r["hi"],
                    "prev_seq": r["lo"],
                    "offset": r["off_hi"],
                    "prev_offset": r["off_lo"],
                }
            )

    lo, hi, n = _np(iv, "lo"), _np(iv, "hi"), _np(iv, "n")
    distinct = union_size(lo, hi)
    records = int(_np(stat, "n").sum())
    local_dups = int(_np(stat, "hi").sum())
    order_violations = int(_np(stat, "lo").sum())
    duplicates = local_dups + int(n.sum()) - distinct
    min_seq = int(lo.min()) if len(lo) else None
    max_seq = int(hi.max()) if len(hi) else None
    missing = 0
    if min_seq is not None and max_seq is not None:
        missing = (max_seq - min_seq + 1) - distinct
        if first_sequence is not None and min_seq > first_sequence:
            missing += min_seq - first_sequence
            samples.append({"kind": "gap", "from": first_sequence, "to": min_seq - 1})
        samples.extend({"kind": "gap", "from": a, "to": b} for a, b in holes(lo, hi, MAX_SAMPLES))
    if n.sum() > distinct:
        samples.append({"kind": "dup-across-chunks", "count": int(n.sum()) - distinct})

    # Stitch chunk edges of each fixed partition in offset order.
    if edge.num_rows > 1:
        e = edge.sort_by([("partition", "ascending"), ("off_lo", "ascending")])
        part = e.column("partition").to_pylist()
        e_lo, e_hi, e_off_lo, e_off_hi = _np(e, "lo"), _np(e, "hi"), _np(e, "off_lo"), _np(e, "off_hi")
        for i in range(1, e.num_rows):
            if part[i] == part[i - 1] and e_lo[i] <= e_hi[i - 1]:
                order_violations += 1
                if len(samples) < 4 * MAX_SAMPLES:
                    samples.append(
                        {
                            "kind": "order",
                            "partition": part[i],
                            "seq": int(e_lo[i]),
                            "prev_seq": int(e_hi[i - 1]),
                            "offset": int(e_off_lo[i]),
                            "prev_offset": int(e_off_hi[i - 1]),
                        }
                    )

    a_lo, a_hi = _np(ack, "lo"), _np(ack, "hi")
    acked = union_size(a_lo, a_hi)
    acked_missing = 0
    if acked:
        acked_missing = union_size(np.concatenate((a_lo, lo)), np.concatenate((a_hi, hi))) - distinct
        if acked_missing:
            m_alo, m_ahi = merged(a_lo, a_hi)
            m_lo, m_hi = merged(lo, hi)
            samples.extend(
                {"kind": "acked-missing", "from": a, "to": b}
                for a, b in uncovered(m_alo, m_ahi, m_lo, m_hi, MAX_SAMPLES)
            )
    partitions = sorted({p for p in iv.column("partition").to_pylist() if p is not None})
    return {
        "producer_id": producer,
        "records": records,
        "distinct": distinct,
        "min_seq": min_seq,
        "max_seq": max_seq,
        "missing": missing,
        "duplicates": duplicates,
        "order_violations": order_violations,
        "acked": acked,
        "acked_missing": acked_missing,
        "partitions": json.dumps(partitions),
        "samples": json.dumps(samples),
    }


def audit_group(table: pa.Table, first_sequence: int | None = None) -> pa.Table:
    """``applyInArrow`` entry point for one ``producer_id`` group."""
    return pa.Table.from_pylist([audit_producer(table, first_sequence)], schema=RESULT_SCHEMA)


def audit_all(findings: pa.Table, first_sequence: int | None = None) -> pa.Table:
    """The per-producer step for findings small enough to merge on the driver."""
    if findings.num_rows == 0:
        return RESULT_SCHEMA.empty_table()
    findings = findings.sort_by([("producer_id", "ascending")])
    codes = pc.dictionary_encode(findings.column("producer_id")).combine_chunks().indices.to_numpy()
    starts = np.flatnonzero(np.concatenate(([True], codes[1:] != codes[:-1])))
    ends = np.concatenate((starts[1:], [len(codes)]))
    rows = [
        audit_producer(findings.slice(s, e - s), first_sequence) for s, e in zip(starts, ends, strict=True)
    ]
    return pa.Table.from_pylist(rows, schema=RESULT_SCHEMA)
