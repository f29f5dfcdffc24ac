"""Per-chunk audit step (vectorized numpy): one Spark task's records in, compact findings out.

A chunk is whatever one task reads: normally one broker partition's offset range, in offset order.
Records are grouped by (partition, producer); within a group, in offset order, a sequence that does
not increase is an order violation (fixed partitions only) and an equal one after sorting is a local
duplicate. What survives is a handful of ``iv`` runs per group, which is all the global duplicate
and gap check has to shuffle.
"""

from collections.abc import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from hybridmq.spark.audit.findings import FINDINGS_SCHEMA, findings_batch

FIXED = "fixed"


def _encode(column: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, pa.Array]:
    """(codes, dictionary) of a string or dictionary column (any number of chunks); the codes keep
    the dictionary's index type (int32), callers widen them where they compute with them."""
    if isinstance(column, pa.ChunkedArray) and pa.types.is_dictionary(column.type) and column.num_chunks > 1:
        column = pa.table({"c": column}).unify_dictionaries().column("c")
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    encoded = column if pa.types.is_dictionary(column.type) else pc.dictionary_encode(column)
    assert isinstance(encoded, pa.DictionaryArray)
    return encoded.indices.to_numpy(zero_copy_only=False), encoded.dictionary


def summarize(
    table: pa.Table, max_samples: int = 10, partition: tuple[str, str] | None = None
) -> pa.RecordBatch:
    """Findings for one chunk (columns: partition, partition_type, offset, producer_id, sequence).

    ``partition`` = (name, type) when the whole chunk is known to be one partition: then the
    ``partition``/``partition_type`` columns are not needed (nor read).
    """
    if table.column("producer_id").null_count or table.column("sequence").null_count:
        table = table.filter(
            pc.and_(pc.is_valid(table.column("producer_id")), pc.is_valid(table.column("sequence")))
        )
    if table.num_rows == 0:
        return _empty()
    prod_code, prod_names = _encode(table.column("producer_id"))
    if partition is not None:
        part_names = pa.array([partition[0]], pa.string())
        part_fixed = np.array([partition[1] == FIXED])
    else:
        part_code, part_names = _encode(table.column("partition"))
        first_of_part = np.unique(part_code, return_index=True)[1]
        types = table.column("partition_type").take(pa.array(first_of_part)).to_pylist()
        part_fixed = np.zeros(len(part_names), dtype=bool)
        part_fixed[part_code[first_of_part]] = np.array([t == FIXED for t in types], dtype=bool)
    offset = table.column("offset").to_numpy().astype(np.int64, copy=False)
    seq = table.column("sequence").to_numpy().astype(np.int64, copy=False)

    # Group key (partition, producer); keep offset order inside each group. Codes follow first
    # appearance, so data that arrives partition by partition in offset order needs no sort.
    # One known partition: a range is read in offset order, and the group is the producer alone.
    if partition is not None:
        group = prod_code
        if not bool(np.all(offset[1:] > offset[:-1])):
            idx = np.argsort(offset, kind="stable")
            group, offset, seq = group[idx], offset[idx], seq[idx]
    else:
        group = part_code.astype(np.int64) * len(prod_names) + prod_code
        same_part = part_code[1:] == part_code[:-1]
        if not bool(np.all((part_code[1:] > part_code[:-1]) | (same_part & (offset[1:] > offset[:-1])))):
            idx = np.lexsort((offset, part_code))
            group, offset, seq = group[idx], offset[idx], seq[idx]
    # Offsets are only needed where findings are sampled: look them up through the sort's
    # permutation (``order``) instead of permuting the whole column.
    order: np.ndarray | None = None
    if len(prod_names) > 1:
        # A stable sort of small integers is a radix sort in numpy: O(n); narrow codes also make
        # the passes below lighter.
        small = group.astype(np.int16) if group.max() < 2**15 else group
        order = np.argsort(small, kind="stable")
        group, seq = small[order], seq[order]

    def off(pos: np.ndarray) -> np.ndarray:
        return offset[pos] if order is None else offset[order[pos]]

    same = group[1:] == group[:-1]
    starts = np.flatnonzero(np.concatenate(([True], ~same)))
    ends = np.concatenate((starts[1:], [len(group)])) - 1
    g_keys = group[starts].astype(np.int64)
    g_part = g_keys // len(prod_names)
    g_prod = g_keys % len(prod_names)

    step = seq[1:] - seq[:-1]
    backward = same & (step <= 0)
    if partition is not None:
        order_bad = backward if part_fixed[0] else np.zeros_like(backward)
    else:
        order_bad = backward & part_fixed[group[1:] // len(prod_names)]
    # Per-group order violation counts via cumulative sums over the "pair" positions.
    order_per_group = _per_group(order_bad, starts, ends)

    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("lo", "hi", "n", "off_lo", "off_hi")}
    kinds: list[np.ndarray] = []
    gidx: list[np.ndarray] = []

    def emit(
        kind: str,
        g: np.ndarray,
        lo: np.ndarray,
        hi: np.ndarray,
        n: np.ndarray,
        off_lo: np.ndarray,
        off_hi: np.ndarray,
    ) -> None:
        kinds.append(np.full(len(g), kind, dtype=object))
        gidx.append(g)
        for key, arr in zip(("lo", "hi", "n", "off_lo", "off_hi"), (lo, hi, n, off_lo, off_hi), strict=True):
            cols[key].append(np.asarray(arr, dtype=np.int64))

    # Order samples (fixed partitions) and edges.
    if order_bad.any():
        pos = np.flatnonzero(order_bad)[:max_samples]
        g_of = np.searchsorted(starts, pos + 1, side="right") - 1
        emit("order", g_of, seq[pos], seq[pos + 1], np.ones(len(pos)), off(pos), off(pos + 1))
    fixed_groups = np.flatnonzero(part_fixed[g_part])
    if len(fixed_groups):
        s, e = starts[fixed_groups], ends[fixed_groups]
        emit("edge", fixed_groups, seq[s], seq[e], e - s + 1, off(s), off(e))

    # Sort each group by sequence (only if some group is not already increasing). Increasing
    # groups hold no duplicate: a duplicate is a step of 0, and every such step is backward.
    has_dup = False
    if backward.any():
        idx = np.lexsort((seq, group))
        seq_s, off_s = seq[idx], off(idx)
        step = seq_s[1:] - seq_s[:-1]
        dup = same & (step == 0)
        has_dup = bool(dup.any())
    else:
        seq_s = seq
    dups_per_group = _per_group(dup, starts, ends) if has_dup else np.zeros(len(starts), dtype=np.int64)
    if has_dup:
        pos = np.flatnonzero(dup)[:max_samples]
        g_of = np.searchsorted(starts, pos + 1, side="right") - 1
        emit("dup", g_of, seq_s[pos + 1], seq_s[pos + 1], np.ones(len(pos)), off_s[pos], off_s[pos + 1])
    emit(
        "stat",
        np.arange(len(starts)),
        order_per_group,
        dups_per_group,
        ends - starts + 1,
        np.zeros(len(starts)),
        np.zeros(len(starts)),
    )

    # Runs of consecutive unique sequences per group.
    if has_dup:
        keep = np.concatenate(([True], ~dup))
        u_group, u_seq = group[keep], seq_s[keep]
        brk = (u_group[1:] != u_group[:-1]) | (u_seq[1:] - u_seq[:-1] != 1)
    else:
        u_group, u_seq = group, seq_s
        brk = ~same | (step != 1)
    r_start = np.flatnonzero(np.concatenate(([True], brk)))
    r_end = np.concatenate((r_start[1:], [len(u_seq)])) - 1
    r_group = np.searchsorted(g_keys, u_group[r_start])
    emit(
        "iv",
        r_group,
        u_seq[r_start],
        u_seq[r_end],
        r_end - r_start + 1,
        np.zeros(len(r_start)),
        np.zeros(len(r_start)),
    )

    g_all = np.concatenate(gidx)
    columns: dict[str, pa.Array] = {
        "kind": pa.array(np.concatenate(kinds), pa.string()),
        "producer_id": prod_names.take(pa.array(g_prod[g_all])),
        "partition": part_names.take(pa.array(g_part[g_all])),
    }
    for key, parts in cols.items():
        columns[key] = pa.array(np.concatenate(parts), pa.int64())
    return findings_batch(columns)


def _per_group(flags: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """How many ``flags`` (one per adjacent pair) fall inside each group ``[start, end]``."""
    if not flags.any():
        return np.zeros(len(starts), dtype=np.int64)
    cum = np.concatenate(([0], np.cumsum(flags)))
    return np.asarray(cum[ends] - cum[starts], dtype=np.int64)


def _empty() -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=FINDINGS_SCHEMA)


def summarize_batches(
    batches: Iterable[pa.RecordBatch], partition: tuple[str, str] | None = None
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` entry point: all batches of the task form one chunk."""
    collected = [b for b in batches if b.num_rows]
    if collected:
        yield summarize(pa.Table.from_batches(collected), partition=partition)


def ack_runs(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` over send-log rows (producer_id, sequence): ``ack`` runs per producer."""
    collected = [b for b in batches if b.num_rows]
    if not collected:
        return
    table = pa.Table.from_batches(collected)
    table = table.filter(
        pc.and_(pc.is_valid(table.column("producer_id")), pc.is_valid(table.column("sequence")))
    )
    if table.num_rows == 0:
        return
    prod_code, prod_names = _encode(table.column("producer_id"))
    seq = table.column("sequence").to_numpy().astype(np.int64, copy=False)
    idx = np.lexsort((seq, prod_code))
    prod_code, seq = prod_code[idx], seq[idx]
    keep = np.concatenate(([True], (prod_code[1:] != prod_code[:-1]) | (seq[1:] != seq[:-1])))
    prod_code, seq = prod_code[keep], seq[keep]
    brk = (prod_code[1:] != prod_code[:-1]) | (seq[1:] - seq[:-1] != 1)
    r_start = np.flatnonzero(np.concatenate(([True], brk)))
    r_end = np.concatenate((r_start[1:], [len(seq)])) - 1
    n = len(r_start)
    zeros = pa.array(np.zeros(n, dtype=np.int64))
    yield findings_batch(
        {
            "kind": pa.array(["ack"] * n, pa.string()),
            "producer_id": prod_names.take(pa.array(prod_code[r_start])),
            "partition": pa.nulls(n, pa.string()),
            "lo": pa.array(seq[r_start], pa.int64()),
            "hi": pa.array(seq[r_end], pa.int64()),
            "n": pa.array(r_end - r_start + 1, pa.int64()),
            "off_lo": zeros,
            "off_hi": zeros,
        }
    )
