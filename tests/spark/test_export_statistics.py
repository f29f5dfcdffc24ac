"""``hybridmq-export`` skips the record batches whose min/max statistics rule out every row of a
filter on ``offset`` or ``sequence``, without changing a query's result."""

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
