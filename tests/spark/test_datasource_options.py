"""The data source's options behave like Spark's Kafka source's: refused when unknown or bad, with the
option named; offsets checked against the partitions; headers typed; timestamps; trigger limits."""

import json
import logging
import time
from pathlib import Path

import pytest
from pyspark.errors import PySparkException, StreamingQueryException
from pyspark.sql import DataFrame, DataFrameReader, SparkSession
from spark_helpers import clean_log, rows_for

from hybridmq.spark.datasource import HybridMQStreamReader
from hybridmq.spark.export import ExportWriter
from hybridmq.spark.options import ReaderOptions

pytestmark = pytest.mark.spark


def reader(spark: SparkSession, path: Path, **options: str) -> DataFrameReader:
    r = spark.read.format("hybridmq").option("path", str(path))
    for key, value in options.items():
        r = r.option(key, value)
    return r


def count(spark: SparkSession, path: Path, **options: str) -> int:
    return reader(spark, path, **options).load().count()


@pytest.mark.parametrize(
    "option, value",
    [
        ("startingOffset", "latest"),  # misspelt startingOffsets
        ("maxOffsetPerTrigger", "5"),
        ("kafka.bootstrap.servers", "127.0.0.1:9092"),
        ("subscribe", "orders"),
    ],
)
def test_unknown_options_are_refused_with_the_known_ones(
    spark: SparkSession, tmp_path: Path, option: str, value: str
) -> None:
    clean_log(tmp_path)
    with pytest.raises(PySparkException) as err:
        count(spark, tmp_path, **{option: value})
    message = str(err.value)
    assert f"unknown option(s) ['{option.lower()}']" in message
    assert "startingOffsets" in message and "maxOffsetsPerTrigger" in message and "failOnDataLoss" in message


def test_option_names_are_case_insensitive(spark: SparkSession, tmp_path: Path) -> None:
    clean_log(tmp_path)
    assert count(spark, tmp_path, STARTINGOFFSETS='{"fixed-0": 45}', endingoffsets='{"fixed-0": 48}') == 48


@pytest.mark.parametrize(
    "option, value",
    [
        ("maxOffsetsPerTrigger", "many"),
        ("maxOffsetsPerTrigger", "0"),
        ("offsetsPerSplit", "1.5"),
        ("minOffsetsPerTrigger", "-3"),
        ("maxTriggerDelay", "soon"),
        ("failOnDataLoss", "maybe"),
        ("includeHeaders", "sometimes"),
        ("timeout", "x"),
        ("startingOffsets", "first"),
        ("endingOffsets", '{"fixed-0": "5"}'),
        ("startingOffsetsByTimestamp", "yesterday"),
        ("partitionType", "fixed,on-demand"),
        ("columns", "partition,nope"),
    ],
)
def test_every_bad_value_names_its_option(
    spark: SparkSession, tmp_path: Path, option: str, value: str
) -> None:
    clean_log(tmp_path)
    with pytest.raises(PySparkException, match=f"option {option}") as err:
        count(spark, tmp_path, **{option: value})
    assert "invalid literal" not in str(err.value)


def test_offsets_are_checked_against_the_partitions(spark: SparkSession, tmp_path: Path) -> None:
    clean_log(tmp_path)
    cases = {
        (
            ("startingOffsets", '{"fixed-9": 0}'),
        ): r"option startingOffsets names partition\(s\) \['fixed-9'\]",
        (("endingOffsets", '{"nope": 3}'),): r"option endingOffsets names partition\(s\) \['nope'\]",
        (
            ("startingOffsets", '{"fixed-1": 26}'),
        ): "option startingOffsets: offset 26 of partition fixed-1 is past its end 25",
        (
            ("endingOffsets", '{"od-0": 11}'),
        ): "option endingOffsets: offset 11 of partition od-0 is past its end 10",
        (
            ("startingOffsets", "latest"),
            ("endingOffsets", "earliest"),
        ): "option startingOffsets: 'latest' is not allowed in a batch query",
        (("endingOffsets", "earliest"),): "option endingOffsets: 'earliest' is not allowed in a batch query",
        (
            ("startingOffsets", '{"fixed-0": 20}'),
            ("endingOffsets", '{"fixed-0": 10}'),
        ): "starts partition fixed-0 at 20, after where option endingOffsets ends it \\(10\\)",
        # a partition the query does not read is unknown to it
        (
            ("partitions", "od-0"),
            ("startingOffsets", '{"fixed-0": 1}'),
        ): r"names partition\(s\) \['fixed-0'\]",
        (
            ("startingOffsetsByTimestamp", '{"od-7": 0}'),
        ): r"option startingOffsetsByTimestamp names partition",
    }
    for options, error in cases.items():
        with pytest.raises(PySparkException, match=error):
            count(spark, tmp_path, **dict(options))
    # the valid neighbours of those cases read what they say
    assert count(spark, tmp_path, startingOffsets='{"fixed-1": 25}', partitions="fixed-1") == 0
    assert count(spark, tmp_path, endingOffsets='{"od-0": 10}', partitions="od-0") == 10
    assert count(spark, tmp_path, startingOffsets='{"fixed-0": 20}', endingOffsets='{"fixed-0": 20}') == 45


def test_starting_offsets_by_timestamp(spark: SparkSession, tmp_path: Path) -> None:
    clean_log(tmp_path)  # the record with sequence s has timestamp 1_780_000_000 + s seconds
    base_ms = 1_780_000_000_000
    rows = (
        reader(
            spark,
            tmp_path,
            startingOffsetsByTimestamp=json.dumps({"fixed-1": base_ms + 20_000, "od-1": base_ms + 99_000}),
            startingOffsets='{"od-0": 7}',
            columns="partition,offset,sequence",
        )
        .load()
        .collect()
    )
    got = {
        p: sorted(r.offset for r in rows if r.partition == p) for p in ("fixed-0", "fixed-1", "od-0", "od-1")
    }
    assert got["fixed-1"] == list(range(20, 25))  # sequence 20 is at offset 20
    assert got["od-1"] == []  # nothing stored at or after that time: start at the end
    assert got["od-0"] == list(range(7, 10)) and got["fixed-0"] == list(range(50))
    first = min((r for r in rows if r.partition == "fixed-1"), key=lambda r: r.offset)
    assert first.sequence == 20


def test_headers_are_opt_in_and_binary_as_in_kafka(spark: SparkSession, tmp_path: Path) -> None:
    writer = ExportWriter(tmp_path)
    headers = [{"b": b"\x00\xff", "n": 5, "t": "text", "none": None, "flag": True}, None]
    writer.append_rows(
        "p", "fixed", [{"producer_id": "a", "sequence": i, "headers": h} for i, h in enumerate(headers)]
    )
    assert "headers" not in reader(spark, tmp_path).load().columns  # includeHeaders defaults to false
    df = reader(spark, tmp_path, includeHeaders="true").load()
    assert df.schema["headers"].dataType.simpleString() == "array<struct<key:string,value:binary>>"
    rows = {r.sequence: r.headers for r in df.collect()}
    got = {h.key: None if h.value is None else bytes(h.value) for h in rows[0]}
    assert got == {"b": b"\x00\xff", "n": b"5", "t": b"text", "none": None, "flag": b"true"}
    assert rows[1] is None
    picked = reader(spark, tmp_path, columns="sequence,headers").load().orderBy("sequence").collect()
    assert [len(r.headers or []) for r in picked] == [5, 0]
    with pytest.raises(PySparkException, match="option includeHeaders=false contradicts option columns"):
        count(spark, tmp_path, includeHeaders="false", columns="headers")


def test_max_offsets_per_trigger(spark: SparkSession, tmp_path: Path) -> None:
    log = tmp_path / "log"
    clean_log(log)
    batches: dict[int, int] = {}

    def on_batch(df: DataFrame, batch_id: int) -> None:
        batches[batch_id] = df.count()

    query = (
        spark.readStream.format("hybridmq")
        .option("path", str(log))
        .option("maxOffsetsPerTrigger", "30")
        .load()
        .writeStream.foreachBatch(on_batch)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert [batches[i] for i in sorted(batches)] == [30, 30, 30, 5]
    with pytest.raises(PySparkException, match="maxRecordsPerBatch, not both"):
        spark.readStream.format("hybridmq").option("path", str(log)).option(
            "maxOffsetsPerTrigger", "3"
        ).option("maxRecordsPerBatch", "3").load()


def test_streaming_start_refuses_unknown_partitions(spark: SparkSession, tmp_path: Path) -> None:
    log = tmp_path / "log"
    clean_log(log)
    query = (
        spark.readStream.format("hybridmq")
        .option("path", str(log))
        .option("startingOffsets", '{"od-5": 0}')
        .load()
        .writeStream.foreachBatch(lambda df, i: None)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(
        StreamingQueryException, match=r"option startingOffsets names partition\(s\) \['od-5'\]"
    ):
        query.awaitTermination(120)


@pytest.mark.parametrize(
    "starting, ending, error",
    [
        (
            '{"fixed-0": 20}',
            '{"fixed-0": 10}',
            r"starts partition fixed-0 at 20, after where option endingOffsets",
        ),
        (
            "latest",
            "earliest",
            r"starts partition \S+ at \d+, after where option endingOffsets ends it \(0\)",
        ),
    ],
)
def test_streaming_start_after_the_end_is_refused(
    spark: SparkSession, tmp_path: Path, starting: str, ending: str, error: str
) -> None:
    log = tmp_path / "log"
    clean_log(log)
    read: list[int] = []
    query = (
        spark.readStream.format("hybridmq")
        .option("path", str(log))
        .option("startingOffsets", starting)
        .option("endingOffsets", ending)
        .load()
        .writeStream.foreachBatch(lambda df, i: read.append(df.count()))
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(StreamingQueryException, match=error):
        query.awaitTermination(120)
    assert sum(read) == 0


def test_min_offsets_per_trigger_waits_for_data_or_the_delay(tmp_path: Path) -> None:
    writer = clean_log(tmp_path)  # 95 offsets
    options = {"path": str(tmp_path), "minOffsetsPerTrigger": "100", "maxOffsetsPerTrigger": "500"}
    patient = HybridMQStreamReader(ReaderOptions.parse({**options, "maxTriggerDelay": "1h"}))
    start = patient.initialOffset()
    limit = patient.getDefaultReadLimit()
    assert patient.latestOffset(start, limit) == start  # 95 < 100: no batch yet
    writer.append_rows("od-0", "on-demand", rows_for("d", range(100, 105)))
    advanced = patient.latestOffset(start, limit)
    assert sum(v["offset"] for v in advanced.values()) == 100
    hasty = HybridMQStreamReader(ReaderOptions.parse({**options, "maxTriggerDelay": "500ms"}))
    start = hasty.initialOffset()
    time.sleep(0.6)
    assert sum(v["offset"] for v in hasty.latestOffset(start, limit).values()) == 100  # waited long enough


def test_lost_range_is_logged_as_a_warning_when_allowed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    writer = clean_log(tmp_path)
    opts = {"path": str(tmp_path), "maxOffsetsPerTrigger": "20", "failOnDataLoss": "false"}
    first = HybridMQStreamReader(ReaderOptions.parse(opts))
    start = first.initialOffset()
    end = first.latestOffset(start, first.getDefaultReadLimit())
    assert end["fixed-0"]["offset"] == 5 and end["fixed-0"]["end"] == 50
    writer.delete_partition("fixed-0")
    restarted = HybridMQStreamReader(ReaderOptions.parse(opts))  # a new process, from the checkpoint
    with caplog.at_level(logging.WARNING, logger="hybridmq.spark"):
        latest = restarted.latestOffset(end, restarted.getDefaultReadLimit())
    assert "fixed-0" not in latest
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "partition fixed-0 is gone: offsets [5, 50) were not read; skipping them (failOnDataLoss=false)"
    ]
