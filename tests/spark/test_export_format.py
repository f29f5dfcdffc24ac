"""The exported-log format, the partition-reader seam and the offset arithmetic (no Spark)."""

from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType
from spark_helpers import clean_log, old_headers_log, rows_for

from hybridmq.spark.audit.job import pack_ranges
from hybridmq.spark.export import ExportWriter, export_source
from hybridmq.spark.exported import ExportedLogSource
from hybridmq.spark.offsets import EARLIEST, LATEST, limit_advance, parse_spec, resolve
from hybridmq.spark.options import ReaderOptions
from hybridmq.spark.positions import Position, decode, encode, next_offsets
from hybridmq.spark.ranges import OffsetRange, plan_ranges
from hybridmq.spark.reading import read_range
from hybridmq.spark.schema import AUDIT_COLUMNS, COLUMNS, ROW_SCHEMA, arrow_schema, spark_ddl
from hybridmq.spark.source import DataLossError, PartitionGoneError, PartitionInfo


def test_arrow_schema_is_exactly_what_spark_expects() -> None:
    fields = []
    from pyspark.sql import types as T

    mapping = {
        "STRING": T.StringType(),
        "BIGINT": T.LongType(),
        "BINARY": T.BinaryType(),
        "TIMESTAMP": T.TimestampType(),
        "ARRAY<STRUCT<key: STRING, value: BINARY>>": T.ArrayType(
            T.StructType([T.StructField("key", T.StringType()), T.StructField("value", T.BinaryType())])
        ),
    }
    for part in spark_ddl().split(", `"):
        name, _, kind = part.strip("`").partition("` ")
        fields.append(T.StructField(name, mapping[kind]))
    assert to_arrow_schema(StructType(fields), timezone="UTC").equals(ROW_SCHEMA)


def test_roundtrip_listing_and_ranges(tmp_path: Path) -> None:
    clean_log(tmp_path)
    source = ExportedLogSource(tmp_path)
    listed = source.list_partitions()
    assert len({p.incarnation for p in listed} - {None}) == 4  # each partition has its own
    assert [PartitionInfo(p.name, p.type, p.start, p.end) for p in listed] == [
        PartitionInfo("fixed-0", "fixed", 0, 50),
        PartitionInfo("fixed-1", "fixed", 0, 25),
        PartitionInfo("od-0", "on-demand", 0, 10),
        PartitionInfo("od-1", "on-demand", 0, 10),
    ]
    batches = list(source.read_range("fixed-0", 5, 12, COLUMNS))
    table = pa.Table.from_batches(batches)
    assert table.schema.equals(ROW_SCHEMA)
    assert table.column("offset").to_pylist() == list(range(5, 12))
    row = table.slice(0, 1).to_pylist()[0]
    assert row["partition"] == "fixed-0" and row["partition_type"] == "fixed"
    assert row["headers"] == [{"key": "h", "value": str(row["sequence"]).encode()}]
    projected = pa.Table.from_batches(list(source.read_range("fixed-1", 0, 100, AUDIT_COLUMNS)))
    assert projected.schema.equals(arrow_schema(AUDIT_COLUMNS)) and projected.num_rows == 25


def test_appends_segments_and_explicit_offsets(tmp_path: Path) -> None:
    writer = ExportWriter(tmp_path)
    assert writer.append_rows("p", "fixed", rows_for("a", range(3))) == (0, 3)
    assert writer.append_rows("p", "fixed", [{"offset": 7, "producer_id": "a", "sequence": 3}]) == (7, 8)
    with pytest.raises(ValueError):
        writer.append_rows("p", "fixed", [{"offset": 5, "producer_id": "a", "sequence": 4}])
    source = ExportedLogSource(tmp_path)
    offsets = pa.Table.from_batches(list(source.read_range("p", 0, 8, ["offset"]))).column("offset")
    assert offsets.to_pylist() == [0, 1, 2, 7]  # a hole (control records) is allowed


def test_gone_partition_and_trimmed_range(tmp_path: Path) -> None:
    writer = ExportWriter(tmp_path)
    writer.append_rows("p", "on-demand", rows_for("a", range(5)))
    writer.append_rows("p", "on-demand", rows_for("a", range(5, 10)))
    assert writer.truncate_before("p", 5) == 5
    source = ExportedLogSource(tmp_path)
    with pytest.raises(DataLossError) as err:
        source.read_range("p", 0, 10, COLUMNS)
    assert err.value.available == 5
    part = OffsetRange("p", "on-demand", 0, 10)
    got = pa.Table.from_batches(list(read_range({"path": str(tmp_path)}, part, ("offset",), False)))
    assert got.column("offset").to_pylist() == list(range(5, 10))
    with pytest.raises(DataLossError):
        list(read_range({"path": str(tmp_path)}, part, ("offset",), True))
    writer.delete_partition("p")
    with pytest.raises(PartitionGoneError):
        source.read_range("p", 5, 10, COLUMNS)
    assert list(read_range({"path": str(tmp_path)}, part, ("offset",), False)) == []
    with pytest.raises(RuntimeError, match="gone"):
        list(read_range({"path": str(tmp_path)}, part, ("offset",), True))


def test_export_source_copies_a_source(tmp_path: Path) -> None:
    clean_log(tmp_path / "a")
    copied = export_source(ExportedLogSource(tmp_path / "a"), tmp_path / "b")
    assert copied["fixed-0"] == (0, 50)

    def shape(root: Path) -> list[tuple[str, str, int, int]]:
        return [(p.name, p.type, p.start, p.end) for p in ExportedLogSource(root).list_partitions()]

    assert shape(tmp_path / "b") == shape(tmp_path / "a")


def test_offset_specs() -> None:
    parts = [PartitionInfo("a", "fixed", 3, 10), PartitionInfo("b", "on-demand", 0, 4)]
    assert parse_spec("startingOffsets", None, EARLIEST) == EARLIEST
    assert parse_spec("startingOffsets", "latest", EARLIEST) == LATEST
    spec = parse_spec("startingOffsets", '{"a": -1, "b": 2}', EARLIEST)
    assert resolve(spec, parts, EARLIEST) == {"a": 10, "b": 2}
    assert resolve(parse_spec("endingOffsets", '{"a": -2}', EARLIEST), parts, LATEST) == {"a": 3, "b": 4}
    assert resolve(EARLIEST, parts, LATEST) == {"a": 3, "b": 0}
    with pytest.raises(ValueError, match="option startingOffsets"):
        parse_spec("startingOffsets", '{"a": "x"}', EARLIEST)
    with pytest.raises(ValueError, match="option endingOffsets"):
        parse_spec("endingOffsets", "soon", EARLIEST)


def test_limit_advance_is_fair_and_bounded() -> None:
    start = {"a": 0, "b": 0, "c": 5}
    available = {"a": 100, "b": 2, "c": 105, "d": 50}
    end = limit_advance(start, available, 60)
    assert sum(end[p] - start.get(p, 0) for p in end) == 60
    assert end["b"] == 2  # a small backlog is served whole
    assert limit_advance(start, available, 10_000) == available
    assert limit_advance({"a": 0}, {"a": 10, "b": 10}, 1) in ({"a": 1, "b": 0}, {"a": 0, "b": 1})


def test_options_and_planning() -> None:
    opts = ReaderOptions.parse(
        {"PATH": "/x", "maxRecordsPerBatch": "5", "offsetsPerSplit": "4", "columns": "offset"}
    )
    assert opts.source == {"path": "/x"} and opts.max_records_per_batch == 5 and opts.columns == ("offset",)
    ranges = plan_ranges([("a", "fixed", 0, 10), ("b", "fixed", 3, 3)], 4)
    assert [(r.start, r.end) for r in ranges] == [(0, 4), (4, 8), (8, 10)]
    with pytest.raises(ValueError):
        ReaderOptions.parse({"path": "/x", "columns": "nope"})
    packed = pack_ranges([OffsetRange(str(i), "fixed", 0, n) for i, n in enumerate([9, 5, 4, 3, 1])], 2)
    assert sorted(sum(r.end - r.start for r in group) for group in packed) == [10, 12]  # greedy LPT


def test_streaming_offsets_of_older_checkpoints_are_read() -> None:
    old = {"fixed-0": 40, "od-1": 7}  # what a checkpoint held before positions remembered ends
    assert decode(old) == {"fixed-0": Position(40, 40), "od-1": Position(7, 7)}
    assert next_offsets(old) == old
    new = encode({"od-1": Position(7, 12, "abc"), "a": Position(3, 3)})
    assert list(new) == ["a", "od-1"] and new["od-1"] == {"offset": 7, "end": 12, "incarnation": "abc"}
    assert decode(new)["od-1"] == Position(7, 12, "abc") and next_offsets(new) == {"a": 3, "od-1": 7}


def test_headers_of_exports_written_as_string_maps_are_read_as_binary(tmp_path: Path) -> None:
    old_headers_log(tmp_path)
    got = pa.Table.from_batches(list(ExportedLogSource(tmp_path).read_range("p", 0, 2, COLUMNS)))
    assert got.schema.equals(ROW_SCHEMA)
    assert got.column("headers").to_pylist() == [[{"key": "h", "value": b"0"}], None]
