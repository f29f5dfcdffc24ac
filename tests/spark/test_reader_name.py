"""Streaming option ``readerName``: each micro-batch commit stores the processed offsets as a named
reader cursor, which the partition's primary reports (``readerLag``: data records the reader has
not committed) and on-demand GC respects."""

import json
import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from hybridmq.client import BlockingProducer
from hybridmq.local.runner import LocalCluster

pytestmark = pytest.mark.spark


def _reader_lag(cluster: LocalCluster, partition: str) -> int | None:
    primary = cluster.table()[partition].primary or ""
    report = cluster.state()["reports"].get(primary, {}).get("partitions", {}).get(partition)
    return None if report is None else int(report.get("readerLag", 0))


def _wait_lag(cluster: LocalCluster, partition: str, want: set[int]) -> int | None:
    """The reported lag once it is one of ``want`` (reports come every 200 ms), else the last one."""
    lag = None
    for _ in range(100):
        lag = _reader_lag(cluster, partition)
        if lag in want:
            return lag
        time.sleep(0.1)
    return lag


def _data_end(spark: SparkSession, bootstrap: str, partition: str) -> int:
    """Offset after the partition's last data record, from a batch read of the data source."""
    df = spark.read.format("hybridmq").option("bootstrap", bootstrap).option("partitions", partition).load()
    return int(df.agg({"offset": "max"}).collect()[0][0]) + 1


def _batch_ends(checkpoint: Path, partition: str) -> list[int]:
    """The end offset of ``partition`` in each micro-batch Spark planned (its offset log)."""
    ends = []
    for f in sorted(
        (checkpoint / "offsets").iterdir(), key=lambda f: int(f.name) if f.name.isdigit() else -1
    ):
        if f.name.isdigit():
            entry = json.loads(f.read_text().splitlines()[-1])[partition]
            # {"offset": next offset to read, "end": ..., "incarnation": ...}, or a bare offset
            ends.append(int(entry["offset"] if isinstance(entry, dict) else entry))
    return ends


def test_reader_name_commits_what_each_micro_batch_processed(spark: SparkSession, tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path / "cluster", mms=2, replicas=1, fixed=1, on_demand_per_mm=0)
    with cluster:
        producer = BlockingProducer(cluster.bootstrap, partition_type="fixed", key="k")
        try:
            for i in range(20):
                producer.send("queue:etl", f"m{i}".encode())
            partition = producer.partition

            def run(reader: str | None) -> Path:
                checkpoint = tmp_path / f"ck-{reader}"
                stream = (
                    spark.readStream.format("hybridmq")
                    .option("bootstrap", cluster.bootstrap)
                    .option("maxRecordsPerBatch", "8")
                    .option("columns", "partition,offset")
                )
                if reader is not None:
                    stream = stream.option("readerName", reader)
                query = (
                    stream.load()
                    .writeStream.foreachBatch(lambda b, _: b.collect())
                    .option("checkpointLocation", str(checkpoint))
                    .trigger(availableNow=True)
                    .start()
                )
                query.awaitTermination(120)
                return checkpoint

            def committed_lags(checkpoint: Path) -> set[int]:
                # Spark commits a micro-batch's offsets to the source when it starts the next one,
                # so the cursor is at the end of the last or of the second-to-last batch.
                end, ends = _data_end(spark, cluster.bootstrap, partition), _batch_ends(checkpoint, partition)
                assert len(ends) >= 2, ends
                return {end - ends[-1], end - ends[-2]}

            run(None)  # without the option nothing is committed: no reader holds the partition
            for i in range(5):
                producer.send("queue:etl", f"n{i}".encode())
            assert _wait_lag(cluster, partition, {0}) == 0

            checkpoint = run("etl")  # reads all 25 in micro-batches of 8, committing as it goes
            for i in range(5):
                producer.send("queue:etl", f"o{i}".encode())
            want = committed_lags(checkpoint)
            assert min(want) >= 5
            assert _wait_lag(cluster, partition, want) in want, (
                f"the reader's cursor is not at a batch end {want}"
            )

            for i in range(20):
                producer.send("queue:etl", f"p{i}".encode())
            checkpoint = run("etl")  # from its checkpoint: the new records, in 3 more batches
            want = committed_lags(checkpoint)
            assert _wait_lag(cluster, partition, want) in want, (
                f"the reader's cursor is not at a batch end {want}"
            )
        finally:
            producer.close()
