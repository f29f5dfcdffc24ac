"""Streaming reads of exported logs: admission control, checkpoints, replay, on-demand partitions."""

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, Row, SparkSession
from spark_helpers import clean_log, rows_for

pytestmark = pytest.mark.spark

Seen = list[tuple[int, str, int]]  # (batch id, partition, offset)


Hook = Callable[[int, list[Row]], None]


def collector(seen: Seen, hook: Hook | None = None) -> Callable[[DataFrame, int], None]:
    def on_batch(df: DataFrame, batch_id: int) -> None:
        rows = df.select("partition", "offset").collect()
        seen.extend((batch_id, r.partition, r.offset) for r in rows)
        if hook is not None:
            hook(batch_id, rows)

    return on_batch


def stream(spark: SparkSession, path: Path, **options: str) -> DataFrame:
    reader = (
        spark.readStream.format("hybridmq").option("path", str(path)).option("columns", "partition,offset")
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def test_admission_control_and_restart_from_checkpoint(spark: SparkSession, tmp_path: Path) -> None:
    log, checkpoint = tmp_path / "log", str(tmp_path / "ck")
    writer = clean_log(log)
    seen: Seen = []
    query = (
        stream(spark, log, maxRecordsPerBatch="40")
        .writeStream.foreachBatch(collector(seen))
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    per_batch = [sum(1 for b, _, _ in seen if b == i) for i in range(3)]
    assert per_batch == [40, 40, 15]
    ends = [json.loads(p["sources"][0]["endOffset"]) for p in query.recentProgress if p["numInputRows"]]
    assert {name: pos["offset"] for name, pos in ends[-1].items()} == {
        "fixed-0": 50, "fixed-1": 25, "od-0": 10, "od-1": 10
    }  # fmt: skip
    assert sorted((p, o) for _, p, o in seen) == sorted(set((p, o) for _, p, o in seen))
    assert len(seen) == 95

    # Meanwhile: more records, a new on-demand partition, and one garbage collected after reading.
    writer.append_rows("fixed-1", "fixed", rows_for("c", range(25, 40)))
    writer.append_rows("od-2", "on-demand", rows_for("e", range(5)))
    writer.delete_partition("od-0")
    again: Seen = []
    query = (
        stream(spark, log, maxRecordsPerBatch="40")
        .writeStream.foreachBatch(collector(again))
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert sorted((p, o) for _, p, o in again) == [("fixed-1", o) for o in range(25, 40)] + [
        ("od-2", o) for o in range(5)
    ]
    assert min(b for b, _, _ in again) == 3  # resumed after the last committed batch


def test_failed_batch_is_replayed_with_exactly_the_same_range(spark: SparkSession, tmp_path: Path) -> None:
    log, checkpoint = tmp_path / "log", str(tmp_path / "ck")
    clean_log(log)
    attempted: Seen = []

    def fail_on_second(batch_id: int, rows: list[Row]) -> None:
        if batch_id == 1:
            raise RuntimeError("sink failed")

    query = (
        stream(spark, log, maxRecordsPerBatch="30")
        .writeStream.foreachBatch(collector(attempted, fail_on_second))
        .option("checkpointLocation", checkpoint)
        .start()
    )
    with pytest.raises(StreamingQueryException):
        query.awaitTermination(120)
    planned = sorted((p, o) for b, p, o in attempted if b == 1)
    assert len(planned) == 30

    replayed: Seen = []
    query = (
        stream(spark, log, maxRecordsPerBatch="30")
        .writeStream.foreachBatch(collector(replayed))
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert sorted((p, o) for b, p, o in replayed if b == 1) == planned
    delivered = [(p, o) for b, p, o in attempted if b == 0] + [(p, o) for _, p, o in replayed]
    assert len(delivered) == 95 and len(set(delivered)) == 95


@pytest.mark.parametrize("fail_on_data_loss", [False, True])
def test_on_demand_partitions_appear_and_vanish_mid_stream(
    spark: SparkSession, tmp_path: Path, fail_on_data_loss: bool
) -> None:
    log = tmp_path / "log"
    writer = clean_log(log)
    seen: Seen = []

    def churn(batch_id: int, rows: list[Row]) -> None:
        if batch_id == 0:  # a new on-demand partition appears; a drained one is collected
            writer.append_rows("od-9", "on-demand", rows_for("x", range(150)))
            writer.delete_partition("od-0")
        elif any(r.partition == "od-9" for r in rows):  # collected before it was read to the end
            writer.delete_partition("od-9")
            writer.append_rows("fixed-1", "fixed", rows_for("c", range(25, 30)))

    query = (
        stream(spark, log, maxRecordsPerBatch="100", failOnDataLoss=str(fail_on_data_loss).lower())
        .writeStream.foreachBatch(collector(seen, churn))
        .option("checkpointLocation", str(tmp_path / "ck"))
        .start()
    )
    try:
        if fail_on_data_loss:
            with pytest.raises(StreamingQueryException, match="od-9 is gone"):
                query.awaitTermination(120)
            return
        query.processAllAvailable()
        while not any(p == "fixed-1" and o == 29 for _, p, o in seen):
            query.processAllAvailable()
    finally:
        query.stop()
    got = [(p, o) for _, p, o in seen]
    assert len(got) == len(set(got))
    assert {o for p, o in got if p == "fixed-1"} == set(range(30))
    assert sum(1 for p, _ in got if p == "od-9") == 100  # the rest was collected unread
    assert sum(1 for p, _ in got if p == "od-0") == 10


def test_starting_and_ending_offsets_with_sentinels(spark: SparkSession, tmp_path: Path) -> None:
    log = tmp_path / "log"
    clean_log(log)
    seen: Seen = []
    query = (
        stream(
            spark,
            log,
            startingOffsets='{"fixed-0": -1, "fixed-1": 20, "od-1": -2}',
            endingOffsets='{"od-1": 5}',
        )
        .writeStream.foreachBatch(collector(seen))
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert sorted((p, o) for _, p, o in seen) == sorted(
        [("fixed-1", o) for o in range(20, 25)]
        + [("od-0", o) for o in range(10)]
        + [("od-1", o) for o in range(5)]
    )


def run_one_batch(spark: SparkSession, log: Path, checkpoint: str, seen: Seen, **options: str) -> None:
    """Start a query whose trigger fires once an hour: it runs its first batch, then is stopped."""
    query = (
        stream(spark, log, **options)
        .writeStream.foreachBatch(collector(seen))
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="1 hour")
        .start()
    )
    try:
        deadline = time.monotonic() + 120
        while not any(p["batchId"] == 0 for p in query.recentProgress):
            assert query.isActive and time.monotonic() < deadline, query.exception()
            time.sleep(0.2)
    finally:
        query.stop()


def test_partition_deleted_while_stopped_fails_the_restarted_query(
    spark: SparkSession, tmp_path: Path
) -> None:
    log, checkpoint = tmp_path / "log", str(tmp_path / "ck")
    writer = clean_log(log)
    writer.append_rows("od-2", "on-demand", rows_for("e", range(60)))
    first: Seen = []
    run_one_batch(spark, log, checkpoint, first, maxRecordsPerBatch="60")
    read_od2 = sorted(o for _, p, o in first if p == "od-2")
    assert len(first) == 60 and read_od2 == list(range(len(read_od2))) and len(read_od2) < 60
    writer.delete_partition("od-2")  # while the query is stopped, with records it has not read

    lost = rf"partition od-2 is gone: offsets \[{len(read_od2)}, 60\) were not read"
    with pytest.raises(StreamingQueryException, match=lost):
        restart(spark, log, checkpoint)  # failOnDataLoss defaults to true, as in Kafka
    with pytest.raises(StreamingQueryException, match=lost):
        restart(spark, log, checkpoint, failOnDataLoss="true")
    rest = restart(spark, log, checkpoint, failOnDataLoss="false")
    assert sorted((p, o) for _, p, o in first + rest) == sorted(
        [(p, o) for p, n in (("fixed-0", 50), ("fixed-1", 25), ("od-0", 10), ("od-1", 10)) for o in range(n)]
        + [("od-2", o) for o in read_od2]
    )


def restart(spark: SparkSession, log: Path, checkpoint: str, **options: str) -> Seen:
    seen: Seen = []
    query = (
        stream(spark, log, **options)
        .writeStream.foreachBatch(collector(seen))
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(120)
    finally:
        query.stop()
    return seen


def test_partition_re_created_under_the_same_name_is_noticed(spark: SparkSession, tmp_path: Path) -> None:
    log, checkpoint = tmp_path / "log", str(tmp_path / "ck")
    writer = clean_log(log)
    writer.append_rows("od-2", "on-demand", rows_for("e", range(60)))
    first: Seen = []
    run_one_batch(spark, log, checkpoint, first, maxRecordsPerBatch="60")
    read_od2 = sum(1 for _, p, _ in first if p == "od-2")
    assert 0 < read_od2 < 60
    writer.delete_partition("od-2")
    writer.append_rows("od-2", "on-demand", rows_for("f", range(80)))  # same name, longer, new records

    lost = rf"partition od-2 was deleted and re-created: offsets \[{read_od2}, 60\) were not read"
    with pytest.raises(StreamingQueryException, match=lost):
        restart(spark, log, checkpoint)
    again = restart(spark, log, checkpoint, failOnDataLoss="false")
    # The new od-2 is read from its beginning, not from where the old one was left.
    assert sorted(o for _, p, o in again if p == "od-2") == list(range(80))


def test_replayed_batch_of_a_re_created_partition_is_not_read_from_the_new_one(
    spark: SparkSession, tmp_path: Path
) -> None:
    log, checkpoint = tmp_path / "log", tmp_path / "ck"
    writer = clean_log(log)
    writer.append_rows("od-2", "on-demand", rows_for("e", range(60)))
    first: Seen = []
    run_one_batch(spark, log, str(checkpoint), first, maxRecordsPerBatch="10", partitions="od-2")
    assert sorted(o for _, _, o in first) == list(range(10))
    # As if the query had died before it committed its batch: Spark replays the batch it planned.
    for name in ("0", ".0.crc"):
        (checkpoint / "commits" / name).unlink()
    writer.delete_partition("od-2")
    writer.append_rows("od-2", "on-demand", rows_for("f", range(80)))

    lost = r"partition od-2 was deleted and re-created: offsets \[0, 60\) were not read"
    with pytest.raises(StreamingQueryException, match=lost):
        restart(spark, log, str(checkpoint), partitions="od-2")
    again = restart(spark, log, str(checkpoint), partitions="od-2", failOnDataLoss="false")
    assert sorted(o for _, _, o in again) == list(range(80))  # the new od-2, each record once
