"""Batch reads of exported logs through the JVM source ``format("hybridmq-export")``."""

import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from spark_helpers import clean_log, old_headers_log, rows_for

from hybridmq.spark.export import ExportWriter

pytestmark = pytest.mark.spark

FORMAT = "hybridmq-export"


def test_reads_the_records_of_the_log_with_the_row_schema(spark: SparkSession, tmp_path: Path) -> None:
    clean_log(tmp_path)
    df = spark.read.format(FORMAT).option("path", str(tmp_path)).option("includeHeaders", "true").load()
    python_source = (
        spark.read.format("hybridmq").option("path", str(tmp_path)).option("includeHeaders", "true").load()
    )
    assert df.schema == python_source.schema  # the same rows as format("hybridmq") gives
    assert df.rdd.getNumPartitions() == 2  # segments packed into about one task per core (local[2])
    rows = df.collect()
    got = {
        (r.partition, r.partition_type, r.offset, r.producer_id, r.sequence, r.destination): (
            bytes(r.key),
            bytes(r.value),
            [(h.key, bytes(h.value)) for h in r.headers],
            r.timestamp.timestamp(),
        )
        for r in rows
    }
    written = {
        "fixed-0": ("fixed", [("a", s) for s in range(30)] + [("b", s) for s in range(20)]),
        "fixed-1": ("fixed", [("c", s) for s in range(25)]),
        "od-0": ("on-demand", [("d", s) for s in range(10)]),
        "od-1": ("on-demand", [("d", s) for s in range(10, 20)]),
    }
    assert len(rows) == len(got) == 95
    for (partition, ptype, offset, producer, seq, destination), detail in got.items():
        assert (producer, seq) in written[partition][1] and ptype == written[partition][0]
        assert destination == "orders" and 0 <= offset < len(written[partition][1])
        assert detail == (
            f"k{seq % 3}".encode(),
            f"{producer}:{seq}".encode(),
            [("h", str(seq).encode())],
            1_780_000_000 + seq,
        )
    # rows the scan's own filter check keeps are copied out whole, headers included
    (one,) = df.where("producer_id = 'c' and sequence = 7").collect()
    assert (one.partition, one.offset, [(h.key, bytes(h.value)) for h in one.headers]) == (
        "fixed-1",
        7,
        [("h", b"7")],
    )
    assert bytes(one.value) == b"c:7" and one.timestamp.timestamp() == 1_780_000_007
    # fixed-0 interleaves a and b: offset order is the order they were appended in
    fixed0 = sorted((r.offset, r.producer_id, r.sequence) for r in rows if r.partition == "fixed-0")
    assert [(p, s) for _, p, s in fixed0[:4]] == [("a", 0), ("b", 0), ("a", 1), ("b", 1)]


def test_a_query_reads_only_the_columns_it_uses(spark: SparkSession, tmp_path: Path) -> None:
    writer = ExportWriter(tmp_path)
    n = 70_000  # more than one Arrow record batch per segment
    producers = pa.array([None if i % 7 == 0 else f"p{i % 5}" for i in range(n)], pa.string())
    writer.append_table("fixed-0", "fixed", pa.table({"producer_id": producers, "sequence": np.arange(n)}))
    writer.append_rows("od-3", "on-demand", rows_for("q", range(3)))
    df = spark.read.format(FORMAT).option("path", str(tmp_path)).load()
    query = df.where("sequence < 700").select("producer_id", "sequence")
    plan = query._jdf.queryExecution().executedPlan().toString()
    assert "struct<producer_id:string,sequence:bigint>" in plan, plan
    assert "value" not in plan.split("struct<", 1)[1], plan
    assert query.count() == 700 + 3
    assert df.count() == n + 3
    assert df.where("producer_id is null").count() == len(range(0, n, 7))
    by_producer = {r.producer_id: r["count"] for r in df.groupBy("producer_id").count().collect()}
    assert by_producer["q"] == 3 and by_producer["p1"] == len([i for i in range(n) if i % 7 and i % 5 == 1])
    assert df.select("partition", "offset").where("partition = 'od-3'").collect() == [
        ("od-3", 0),
        ("od-3", 1),
        ("od-3", 2),
    ]


def test_filters_the_scan_checks_itself_give_what_spark_would(spark: SparkSession, tmp_path: Path) -> None:
    writer = ExportWriter(tmp_path)
    n = 70_000
    producers = pa.array([None if i % 7 == 0 else f"p{i % 5}" for i in range(n)], pa.string())
    table = pa.table(
        {"producer_id": producers, "sequence": pa.array([None if i % 11 == 0 else i for i in range(n)])}
    )
    writer.append_table("fixed-0", "fixed", table.slice(0, 40_000))
    writer.append_table("fixed-0", "fixed", table.slice(40_000))  # a second segment: offsets [40000, 70000)
    writer.append_rows("od-3", "on-demand", rows_for("p1", range(3)))
    df = spark.read.format(FORMAT).option("path", str(tmp_path)).load()
    queries = {
        "sequence < 700": lambda i, p, s: s is not None and s < 700,
        "sequence >= 69990 and sequence <= 69995": lambda i, p, s: s is not None and 69990 <= s <= 69995,
        "sequence = 22 or sequence = 23": lambda i, p, s: s in (22, 23),
        "producer_id = 'p1'": lambda i, p, s: p == "p1",
        "producer_id in ('p2', 'p3') and offset > 39990 and offset < 40010": lambda i, p, s: (
            p in ("p2", "p3") and 39990 < i < 40010
        ),
        "producer_id is null": lambda i, p, s: p is None,
        "partition = 'fixed-0' and offset >= 69998": lambda i, p, s: i >= 69998,
        "partition_type = 'on-demand'": lambda i, p, s: False,
        "not (sequence < 69000)": lambda i, p, s: s is not None and s >= 69000,
    }
    rows = list(zip(range(n), producers.to_pylist(), table.column("sequence").to_pylist(), strict=True))
    for where, keep in queries.items():
        expected = sorted(i for i, p, s in rows if keep(i, p, s))
        got = sorted(
            r.offset for r in df.where(where).where("partition = 'fixed-0'").select("offset").collect()
        )
        assert got == expected, where
    od3 = df.where("partition_type = 'on-demand' and producer_id = 'p1'").select("offset").collect()
    assert sorted(r.offset for r in od3) == [0, 1, 2]
    plan = df.where("sequence < 700 and partition = 'od-3'")._jdf.queryExecution().executedPlan().toString()
    pushed = "IsNotNull(sequence), IsNotNull(partition), LessThan(sequence,700), EqualTo(partition,od-3)"
    assert f"PushedFilters: [{pushed}]" in plan, plan
    assert not re.search(r"\bFilter\b", plan), plan  # checked exactly by the scan, not again by Spark


def test_bad_options_and_paths_are_refused_clearly(spark: SparkSession, tmp_path: Path) -> None:
    clean_log(tmp_path / "log")
    with pytest.raises(
        Exception, match=r"(?i)unknown option 'startingOffsets'.*known options: \[path, includeHeaders\]"
    ):
        spark.read.format(FORMAT).option("path", str(tmp_path / "log")).option("startingOffsets", "x").load()
    with pytest.raises(Exception, match=r"option path .* is required"):
        spark.read.format(FORMAT).load()
    with pytest.raises(Exception, match="is not a hybridmq exported log"):
        spark.read.format(FORMAT).option("path", str(tmp_path)).load().count()
    with pytest.raises(Exception, match="includeHeaders must be true or false, got 'yes'"):
        spark.read.format(FORMAT).option("path", str(tmp_path / "log")).option("includeHeaders", "yes").load()


def test_headers_stored_as_string_maps_name_the_source_that_converts_them(
    spark: SparkSession, tmp_path: Path
) -> None:
    old_headers_log(tmp_path)
    reader = spark.read.format(FORMAT).option("path", str(tmp_path))
    assert reader.load().select("sequence").count() == 2  # without headers the segment reads fine
    with pytest.raises(Exception, match=r"stores headers as a map.*format\(\"hybridmq\"\)"):
        reader.option("includeHeaders", "true").load().collect()
