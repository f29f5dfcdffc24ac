"""Batch reads of exported logs through the ``hybridmq`` data source."""

from pathlib import Path

import pytest
from pyspark.sql import DataFrameReader, SparkSession
from spark_helpers import clean_log

pytestmark = pytest.mark.spark


def test_reads_every_record_with_the_row_schema(spark: SparkSession, tmp_path: Path) -> None:
    clean_log(tmp_path)
    df = spark.read.format("hybridmq").option("path", str(tmp_path)).option("includeHeaders", "true").load()
    assert [f.name for f in df.schema.fields] == [
        "partition", "partition_type", "offset", "destination", "key",
        "producer_id", "sequence", "timestamp", "headers", "value",
    ]  # fmt: skip
    assert df.rdd.getNumPartitions() == 4  # one input partition per broker partition
    rows = df.collect()
    assert len(rows) == 95
    first = next(r for r in rows if r.partition == "fixed-1" and r.offset == 7)
    assert first.partition_type == "fixed" and first.producer_id == "c" and first.sequence == 7
    assert [(h.key, bytes(h.value)) for h in first.headers] == [("h", b"7")]
    assert bytes(first.value) == b"c:7" and bytes(first.key) == b"k1"
    assert first.timestamp.timestamp() == 1_780_000_007
    assert {(r.partition, r.offset) for r in rows} == {
        (p, o) for p, n in (("fixed-0", 50), ("fixed-1", 25), ("od-0", 10), ("od-1", 10)) for o in range(n)
    }


def test_offsets_split_columns_and_filters(spark: SparkSession, tmp_path: Path) -> None:
    clean_log(tmp_path)

    def base() -> DataFrameReader:  # a reader is mutable: a fresh one per query
        return spark.read.format("hybridmq").option("path", str(tmp_path))

    split = base().option("offsetsPerSplit", "8").option("columns", "partition,offset").load()
    assert split.columns == ["partition", "offset"]
    assert split.rdd.getNumPartitions() == 7 + 4 + 2 + 2
    assert split.count() == 95
    ranged = (
        base()
        .option("startingOffsets", '{"fixed-0": 10, "od-0": -1}')
        .option("endingOffsets", '{"fixed-0": 20, "fixed-1": 5}')
        .option("columns", "partition,offset")
        .load()
        .groupBy("partition")
        .agg({"offset": "min", "partition": "count"})
        .collect()
    )
    got = {r["partition"]: (r["min(offset)"], r["count(partition)"]) for r in ranged}
    assert got == {"fixed-0": (10, 10), "fixed-1": (0, 5), "od-1": (0, 10)}
    assert base().option("partitionType", "on-demand").load().count() == 20
    assert base().option("partitions", "fixed-1,od-0").load().count() == 35
    assert base().option("partitions", "nothing").load().count() == 0


def test_user_schema_selects_columns(spark: SparkSession, tmp_path: Path) -> None:
    clean_log(tmp_path)
    df = (
        spark.read.format("hybridmq")
        .schema("producer_id STRING, sequence BIGINT")
        .option("path", str(tmp_path))
        .load()
    )
    assert df.where("producer_id = 'a'").agg({"sequence": "max"}).collect()[0][0] == 29
