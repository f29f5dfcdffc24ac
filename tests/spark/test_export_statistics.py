"""``hybridmq-export`` skips the record batches whose min/max statistics rule out every row of a
filter on ``offset`` or ``sequence``, without changing a query's result."""

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession

from hybridmq.spark.export import ExportWriter

pytestmark = pytest.mark.spark

BATCH = 65536  # rows of a record batch in an export (the format's maximum)


def scan_metrics(df: DataFrame) -> tuple[list[int], dict[str, int]]:
    """Run ``df`` (its offsets, sorted) and read the scan's metrics from the plan that ran it."""
    query = df.select("offset")
    offsets = sorted(r.offset for r in query.collect())
    plan: Any = query._jdf.queryExecution().executedPlan()
    if plan.getClass().getSimpleName() == "AdaptiveSparkPlanExec":
        plan = plan.executedPlan()
    leaves = plan.collectLeaves()
    scans = [leaves.apply(i) for i in range(leaves.size())]
    scans = [n for n in scans if n.getClass().getSimpleName() == "BatchScanExec"]
    assert len(scans) == 1, plan.toString()
    metrics = scans[0].metrics()
    wanted = ("batchesRead", "batchesSkippedByStatistics")
    return offsets, {k: int(metrics.apply(k).value()) for k in wanted}


def without_statistics(segment: Path) -> None:
    """Rewrite ``segment`` as an export written before batches carried statistics."""
    table = pa.ipc.open_file(pa.BufferReader(segment.read_bytes())).read_all()  # not mapped: rewritten
    with pa.OSFile(str(segment), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=BATCH):
            writer.write_batch(batch)


def test_batches_ruled_out_by_their_statistics_are_skipped(spark: SparkSession, tmp_path: Path) -> None:
    writer = ExportWriter(tmp_path)
    n = 3 * BATCH + 100  # four batches: sequences [0, 65536), [65536, 131072), ... with some nulls
    sequences = [None if i % 11 == 0 else i for i in range(n)]
    writer.append_table("fixed-0", "fixed", pa.table({"sequence": pa.array(sequences, pa.int64())}))
    # A batch without any sequence (no statistics for it): read, whatever the filter on sequence.
    writer.append_table("fixed-0", "fixed", pa.table({"producer_id": pa.array(["x"] * 50)}))
    # A segment written before statistics existed, with sequences that statistics would rule out.
    old = n + 50
    writer.append_table("fixed-0", "fixed", pa.table({"sequence": pa.array(range(10**6, 10**6 + 20))}))
    segments = sorted((tmp_path / "fixed-0").glob("*.arrow"))
    assert len(segments) == 3
    without_statistics(segments[-1])
    stored = (
        dict(enumerate(sequences)) | dict.fromkeys(range(n, old)) | {old + j: 10**6 + j for j in range(20)}
    )

    df = spark.read.format("hybridmq-export").option("path", str(tmp_path)).load()
    cases = {
        # where: (which stored (offset, sequence) match, batches read, batches skipped)
        "sequence < 700": (lambda o, s: s is not None and s < 700, 3, 3),
        "sequence >= 131072 and sequence < 131080": (
            lambda o, s: s is not None and 131072 <= s < 131080,
            3,
            3,
        ),
        # The last full batch reaches past 196600, then the 100-row batch, then the old segment.
        "sequence > 196600": (lambda o, s: s is not None and s > 196600, 4, 2),
        "sequence >= 1000000": (lambda o, s: s is not None and s >= 10**6, 2, 4),
        "sequence = 65535 or sequence = 65537": (lambda o, s: s in (65535, 65537), 6, 0),  # no range pushed
        # The other segments are not even opened: their names bound their offsets.
        "offset >= 65536 and offset < 65540": (lambda o, s: 65536 <= o < 65540, 1, 3),
    }
    for where, (keep, read, skipped) in cases.items():
        expected = sorted(o for o, s in stored.items() if keep(o, s))
        got, metrics = scan_metrics(df.where(where))
        assert got == expected, where
        assert metrics == {"batchesRead": read, "batchesSkippedByStatistics": skipped}, where
    # Without a filter on those columns nothing is skipped and every row comes back.
    assert scan_metrics(df)[1] == {"batchesRead": 6, "batchesSkippedByStatistics": 0}


def jobs_run_by(spark: SparkSession, action: Callable[[], Any]) -> tuple[Any, int]:
    """``action()``'s result and how many Spark jobs it ran (the status tracker's job group)."""
    group = f"probe-{uuid.uuid4().hex}"
    spark.sparkContext.setJobGroup(group, "how many jobs a query runs")
    try:
        result = action()
    finally:
        spark.sparkContext._jsc.clearJobGroup()
    return result, len(spark.sparkContext.statusTracker().getJobIdsForGroup(group))


def test_counts_the_statistics_answer_run_no_spark_job(spark: SparkSession, tmp_path: Path) -> None:
    writer = ExportWriter(tmp_path)
    n = 2 * BATCH + 10
    sequences = [None if i % 13 == 0 else i for i in range(n)]
    producers = [None if i % 7 == 0 else f"p{i % 3}" for i in range(n)]
    table = pa.table({"sequence": pa.array(sequences, pa.int64()), "producer_id": pa.array(producers)})
    writer.append_table("fixed-0", "fixed", table.slice(0, BATCH + 5))
    writer.append_table("fixed-0", "fixed", table.slice(BATCH + 5))
    writer.append_table("od-1", "on-demand", table.slice(0, 100))
    rows = [("fixed-0", o, s, p) for o, (s, p) in enumerate(zip(sequences, producers, strict=True))]
    rows += [("od-1", o, s, p) for o, (s, p) in enumerate(zip(sequences[:100], producers[:100], strict=True))]
    df = spark.read.format("hybridmq-export").option("path", str(tmp_path)).load()
    cases = {
        # where: (which stored (partition, offset, sequence, producer) match, counted while planned)
        "true": (lambda r: True, True),
        "sequence < 700": (lambda r: r[2] is not None and r[2] < 700, True),
        "partition = 'fixed-0' and offset >= 65530 and sequence <= 65550": (
            lambda r: r[0] == "fixed-0" and r[1] >= 65530 and r[2] is not None and r[2] <= 65550,
            True,
        ),
        "partition_type = 'on-demand' and sequence is not null": (
            lambda r: r[0] == "od-1" and r[2] is not None,
            True,
        ),
        "sequence < 10 or offset > 131075": (
            lambda r: (r[2] is not None and r[2] < 10) or r[1] > 131075,
            False,
        ),
        "producer_id = 'p1'": (lambda r: r[3] == "p1", False),  # reads a string column: parallel tasks
    }
    for where, (keep, pushed) in cases.items():
        query = df.where(where)
        plan = query.groupBy().count()._jdf.queryExecution().executedPlan().toString()
        assert ("BatchScan" not in plan) == pushed, (where, plan)
        counted, jobs = jobs_run_by(spark, query.count)
        assert counted == sum(1 for r in rows if keep(r)), where
        assert (jobs == 0) == pushed, (where, jobs)
    below = sum(1 for r in rows if r[2] is not None and r[2] < 700)
    assert df.where("sequence < 700").selectExpr("count(*) as a", "count(*) as b").collect() == [
        (below, below)
    ]
    # An exported log without any segment still counts 0, and so does a filter no segment passes.
    empty = tmp_path / "empty"
    ExportWriter(empty)
    assert jobs_run_by(
        spark, spark.read.format("hybridmq-export").option("path", str(empty)).load().count
    ) == (
        0,
        0,
    )
    assert jobs_run_by(spark, df.where("partition = 'nope'").count) == (0, 0)
