"""A streaming query over a live cluster notices a partition that vanished, or whose data was
replaced (its incarnation changed, even when the new data reaches past the checkpointed offset),
while it was stopped."""

import asyncio
import json
import os
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import DataStreamWriter

from hybridmq.client import BlockingProducer, Fetcher
from hybridmq.local.runner import LocalCluster

pytestmark = pytest.mark.spark

Seen = list[tuple[int, bytes]]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    """1 CM + 1 MM holding one fixed partition (``fixed-0-0``)."""
    with LocalCluster(tmp_path / "cluster", mms=1, fixed_per_mm=1, on_demand_per_mm=0) as c:
        yield c


def produce(bootstrap: str, values: list[str]) -> str:
    producer = BlockingProducer(bootstrap, partition_type="fixed", key="inc")
    try:
        for value in values:
            producer.send("queue:inc", value.encode())
        return producer.partition
    finally:
        producer.close()


def writer(
    spark: SparkSession, bootstrap: str, seen: Seen, checkpoint: Path, **options: str
) -> DataStreamWriter:
    reader = spark.readStream.format("hybridmq").option("bootstrap", bootstrap)
    for key, value in {"partitions": "fixed-0-0", "columns": "offset,value", **options}.items():
        reader = reader.option(key, value)

    def on_batch(df: DataFrame, _: int) -> None:
        seen.extend((r.offset, bytes(r.value)) for r in df.collect())

    return reader.load().writeStream.foreachBatch(on_batch).option("checkpointLocation", str(checkpoint))


def run_availablenow(spark: SparkSession, bootstrap: str, checkpoint: Path, **options: str) -> Seen:
    seen: Seen = []
    query = writer(spark, bootstrap, seen, checkpoint, **options).trigger(availableNow=True).start()
    try:
        query.awaitTermination(180)
    finally:
        query.stop()
    return seen


def read_ten_of_thirty(spark: SparkSession, bootstrap: str, checkpoint: Path) -> str:
    """Produce 30 records, run one micro-batch of 10, stop: 20 records of the partition are unread."""
    partition = produce(bootstrap, [f"old-{i}" for i in range(30)])
    assert partition == "fixed-0-0"
    first: Seen = []
    query = (
        writer(spark, bootstrap, first, checkpoint, maxOffsetsPerTrigger="10")
        .trigger(processingTime="1 hour")
        .start()
    )
    try:
        deadline = time.monotonic() + 180
        while not (checkpoint / "commits" / "0").exists():
            assert query.isActive and time.monotonic() < deadline, query.exception()
            time.sleep(0.2)
    finally:
        query.stop()
    assert first == [(o, f"old-{o}".encode()) for o in range(10)]
    return partition


def test_replaced_partition_is_reported_with_the_unread_range(
    spark: SparkSession, cluster: LocalCluster, tmp_path: Path
) -> None:
    bootstrap, checkpoint = cluster.bootstrap, tmp_path / "ck"
    partition = read_ten_of_thirty(spark, bootstrap, checkpoint)

    # The MM loses the partition's data while the query is stopped; the partition comes back empty
    # and gets more records than the query had read, so offsets alone would not show it.
    cluster.kill_mm("mm-0", signal.SIGKILL)
    shutil.rmtree(cluster.dir / "mm-0" / partition)
    cluster.start_mm("mm-0")
    assert produce(bootstrap, [f"new-{i}" for i in range(40)]) == partition

    lost = rf"partition {partition} was deleted and re-created: offsets \[10, 30\) were not read"
    with pytest.raises(StreamingQueryException, match=lost):
        run_availablenow(spark, bootstrap, checkpoint)

    # failOnDataLoss=false: a WARNING, then the new data is read from its beginning.
    again = run_availablenow(spark, bootstrap, checkpoint, failOnDataLoss="false")
    assert sorted(again) == [(o, f"new-{o}".encode()) for o in range(40)]


def test_vanished_partition_is_reported_with_the_unread_range(
    spark: SparkSession, cluster: LocalCluster, tmp_path: Path
) -> None:
    bootstrap, checkpoint = cluster.bootstrap, tmp_path / "ck"
    partition = read_ten_of_thirty(spark, bootstrap, checkpoint)
    # The partition leaves the assignment table while the query is stopped (as a garbage-collected
    # on-demand partition does): the CM stops listing it and its MM deletes its data.
    table = json.loads(cluster.assignments.read_text())
    table["partitions"] = [p for p in table["partitions"] if p["name"] != partition]
    fresh = cluster.assignments.with_suffix(".new")
    fresh.write_text(json.dumps(table))
    os.replace(fresh, cluster.assignments)
    deadline = time.monotonic() + 60
    while partition in asyncio.run(listed(bootstrap)):
        assert time.monotonic() < deadline, "the CM still lists the partition"
        time.sleep(0.2)

    lost = rf"partition {partition} is gone: offsets \[10, 30\) were not read"
    with pytest.raises(StreamingQueryException, match=lost):
        run_availablenow(spark, bootstrap, checkpoint)
    assert run_availablenow(spark, bootstrap, checkpoint, failOnDataLoss="false") == []


async def listed(bootstrap: str) -> set[str]:
    fetcher = await Fetcher.connect(bootstrap)
    try:
        return {p.name for p in await fetcher.partitions()}
    finally:
        await fetcher.close()
