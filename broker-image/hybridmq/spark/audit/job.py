"""The audit as a Spark job: records -> per-chunk step (mapInArrow) -> per-producer step.

Only the compact findings (runs, edges, stats, samples) are shuffled by producer; the records are
read and checked where they are, one Spark task per broker partition (or offset split).

Two ways to get the records to the per-chunk step (``via``):

* ``ranges`` (default): the driver plans the offset ranges with the data source's own planner and
  each task reads its range through the same partition reader, straight into Arrow. The records
  never become JVM rows (no Arrow -> row -> Arrow round trip), which is what makes the audit fast.
* ``datasource``: ``spark.read.format("hybridmq")`` with the audit columns, then ``mapInArrow``.
"""

from collections.abc import Iterator, Mapping, Sequence
from functools import partial

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from hybridmq.spark.audit.chunk import ack_runs, summarize_batches
from hybridmq.spark.audit.findings import FINDINGS_DDL, FINDINGS_SCHEMA, RESULT_DDL, RESULT_SCHEMA
from hybridmq.spark.audit.producer import audit_all, audit_group
from hybridmq.spark.datasource import HybridMQBatchReader
from hybridmq.spark.options import ReaderOptions
from hybridmq.spark.ranges import OffsetRange
from hybridmq.spark.reading import read_range
from hybridmq.spark.schema import AUDIT_COLUMNS

SEND_LOG_DDL = "producer_id STRING, sequence BIGINT"


def _summarize(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    return summarize_batches(batches)


def _acks(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    return ack_runs(batches)


# A range is one known partition: its name and type need not be read with every record.
RANGE_COLUMNS = ("offset", "producer_id", "sequence")
Task = list[tuple[str, str, int, int]]  # (partition, partition_type, start, end) per range


def _read_and_summarize(
    tasks: list[Task],
    source_options: dict[str, str],
    fail_on_data_loss: bool,
    batches: Iterator[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """Task body: the input is this task's number (``spark.range``); the ranges ride in the closure."""
    for batch in batches:
        for task_id in batch.column("id").to_pylist():
            for name, ptype, start, end in tasks[task_id]:
                part = OffsetRange(name, ptype, start, end)
                records = read_range(
                    source_options, part, RANGE_COLUMNS, fail_on_data_loss, dictionaries=True
                )
                yield from summarize_batches(records, partition=(name, ptype))


def pack_ranges(ranges: Sequence[OffsetRange], slots: int) -> list[list[OffsetRange]]:
    """Greedy longest-first packing of ranges into ``slots`` tasks of about equal offset counts.

    A task costs tens of milliseconds of Python worker round trips, so the audit runs one task per
    core, each working through its ranges one by one (every range is still its own chunk).
    """
    bins: list[list[OffsetRange]] = [[] for _ in range(max(1, min(slots, len(ranges))))]
    loads = [0] * len(bins)
    for r in sorted(ranges, key=lambda r: r.end - r.start, reverse=True):
        i = loads.index(min(loads))
        bins[i].append(r)
        loads[i] += r.end - r.start
    return [b for b in bins if b]


def findings_from_ranges(
    spark: SparkSession, source_options: Mapping[str, str], tasks: int | None = None
) -> DataFrame:
    opts = ReaderOptions.parse(source_options)
    ranges = [r for r in HybridMQBatchReader(opts).partitions() if isinstance(r, OffsetRange)]
    packed = pack_ranges(ranges, tasks or spark.sparkContext.defaultParallelism)
    work = [[(r.partition, r.partition_type, r.start, r.end) for r in group] for group in packed]
    # spark.range(n, numPartitions=n): task i gets the single row i, with no Python RDD stage.
    frame = spark.range(0, max(1, len(work)), 1, max(1, len(work)))
    task = partial(_read_and_summarize, work or [[]], dict(opts.source), opts.fail_on_data_loss)

    def read_and_summarize(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return task(batches)

    return frame.mapInArrow(read_and_summarize, FINDINGS_DDL)


def records_frame(spark: SparkSession, source_options: Mapping[str, str]) -> DataFrame:
    reader = spark.read.format("hybridmq").option("columns", ",".join(AUDIT_COLUMNS))
    for key, value in source_options.items():
        reader = reader.option(key, value)
    return reader.load()


def send_log_frame(spark: SparkSession, paths: Sequence[str]) -> DataFrame:
    """Send logs: CSV lines ``producer_id,sequence`` (no header, ``#`` comments) per acked message."""
    return spark.read.schema(SEND_LOG_DDL).option("comment", "#").csv(list(paths))


def run_audit(
    spark: SparkSession,
    source_options: Mapping[str, str],
    send_logs: Sequence[str] = (),
    first_sequence: int | None = None,
    via: str = "ranges",
    driver_merge_limit: int = 1_000_000,
) -> pa.Table:
    """One row per producer (``findings.RESULT_SCHEMA``)."""
    if via == "ranges":
        findings = findings_from_ranges(spark, source_options)
    elif via == "datasource":
        findings = records_frame(spark, source_options).mapInArrow(_summarize, FINDINGS_DDL)
    else:
        raise ValueError(f"via must be 'ranges' or 'datasource', got {via!r}")
    if send_logs:
        findings = findings.unionByName(send_log_frame(spark, send_logs).mapInArrow(_acks, FINDINGS_DDL))
    # The findings are usually tiny (a few runs per partition and producer): collect them in the
    # same job that reads the records and merge them on the driver (a persist + count first would
    # cost a second pass). Pathological interleavings make them big: then shuffle them by producer.
    if driver_merge_limit > 0:
        table = _collect_small(findings)
        if table is not None and table.num_rows <= driver_merge_limit:
            return audit_all(table.cast(FINDINGS_SCHEMA), first_sequence)
    group_fn = partial(audit_group, first_sequence=first_sequence)

    def per_producer(table: pa.Table) -> pa.Table:
        return group_fn(table)

    result = findings.groupBy("producer_id").applyInArrow(per_producer, RESULT_DDL).toArrow()
    return result.cast(RESULT_SCHEMA)


def _collect_small(findings: DataFrame) -> pa.Table | None:
    """The findings on the driver, or None when they exceed ``spark.driver.maxResultSize``."""
    try:
        return findings.toArrow()
    except Exception as err:
        if "maxResultSize" not in str(err):
            raise
        return None
