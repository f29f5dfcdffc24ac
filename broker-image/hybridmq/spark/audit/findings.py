"""The rows that flow from the per-partition step to the per-producer step of the audit.

Every kind shares one schema so that they can be unioned and shuffled by ``producer_id`` together:

======  ==========================================================================================
kind    meaning of lo / hi / n / off_lo / off_hi
======  ==========================================================================================
iv      a run of consecutive sequences ``[lo, hi]`` present (deduplicated within the chunk), n = count
ack     a run of acknowledged sequences ``[lo, hi]`` from a producer's send log, n = count
stat    per (partition, producer) and chunk: n = records, lo = order violations, hi = local duplicates
edge    fixed partitions: first (lo, off_lo) and last (hi, off_hi) sequence/offset of the chunk
order   sample: sequence ``hi`` at offset ``off_hi`` follows ``lo`` at ``off_lo`` (not increasing)
dup     sample: sequence ``lo`` seen again at offset ``off_hi`` (first at ``off_lo``)
======  ==========================================================================================
"""

import pyarrow as pa

FINDINGS_SCHEMA = pa.schema(
    [
        ("kind", pa.string()),
        ("producer_id", pa.string()),
        ("partition", pa.string()),
        ("lo", pa.int64()),
        ("hi", pa.int64()),
        ("n", pa.int64()),
        ("off_lo", pa.int64()),
        ("off_hi", pa.int64()),
    ]
)
FINDINGS_DDL = (
    "kind STRING, producer_id STRING, `partition` STRING, lo BIGINT, hi BIGINT, n BIGINT,"
    " off_lo BIGINT, off_hi BIGINT"
)

# One row per producer out of the per-producer step.
RESULT_SCHEMA = pa.schema(
    [
        ("producer_id", pa.string()),
        ("records", pa.int64()),
        ("distinct", pa.int64()),
        ("min_seq", pa.int64()),
        ("max_seq", pa.int64()),
        ("missing", pa.int64()),
        ("duplicates", pa.int64()),
        ("order_violations", pa.int64()),
        ("acked", pa.int64()),
        ("acked_missing", pa.int64()),
        ("partitions", pa.string()),  # JSON list of partition names
        ("samples", pa.string()),  # JSON list of sample findings
    ]
)
RESULT_DDL = (
    "producer_id STRING, records BIGINT, `distinct` BIGINT, min_seq BIGINT, max_seq BIGINT,"
    " missing BIGINT, duplicates BIGINT, order_violations BIGINT, acked BIGINT, acked_missing BIGINT,"
    " `partitions` STRING, samples STRING"
)


def findings_batch(columns: dict[str, pa.Array]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([columns[f.name] for f in FINDINGS_SCHEMA], schema=FINDINGS_SCHEMA)
