"""The delivery audit: clean runs pass; planted loss, reordering and duplication are caught."""

import json
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from spark_helpers import clean_log, interleaved, rows_for

from hybridmq.spark.audit import main
from hybridmq.spark.audit.baseline import baseline_audit, vectorized_audit
from hybridmq.spark.audit.chunk import summarize
from hybridmq.spark.audit.job import run_audit
from hybridmq.spark.audit.producer import audit_all
from hybridmq.spark.audit.report import build_report
from hybridmq.spark.export import ExportWriter
from hybridmq.spark.exported import ExportedLogSource
from hybridmq.spark.schema import AUDIT_COLUMNS

COUNTS = ("records", "missing", "duplicates", "order_violations", "acked_missing")


def faulty_log(root: Path) -> None:
    """Planted: a loses 7 and resends 3 late (fixed-0); c has 11 before 10 (fixed-1); d's 12 is
    both in od-0 and od-1; e is reordered in an on-demand partition (allowed)."""
    writer = ExportWriter(root)
    a = rows_for("a", [s for s in range(30) if s != 7]) + rows_for("a", [3])
    writer.append_rows("fixed-0", "fixed", interleaved(a, rows_for("b", range(20))))
    writer.append_rows("fixed-1", "fixed", rows_for("c", [*range(10), 11, 10, *range(12, 25)]))
    writer.append_rows("od-0", "on-demand", rows_for("d", [*range(10), 12]) + rows_for("e", [2, 0, 1]))
    writer.append_rows("od-1", "on-demand", rows_for("d", range(10, 20)))


def write_send_logs(root: Path) -> list[str]:
    root.mkdir()
    (root / "a.csv").write_text("# acked by producer a\n" + "".join(f"a,{s}\n" for s in range(30)))
    (root / "c.csv").write_text("".join(f"c,{s}\n" for s in range(26)))  # 25 acked, never stored
    return [str(root)]


EXPECTED = {"records": 99, "missing": 1, "duplicates": 2, "order_violations": 2, "acked_missing": 2}


def kernel_audit(root: Path, split: int | None = None) -> dict[str, int]:
    source = ExportedLogSource(root)
    chunks = []
    for info in source.list_partitions():
        step = split or info.end
        for lo in range(info.start, info.end, step):
            batches = list(source.read_range(info.name, lo, min(lo + step, info.end), AUDIT_COLUMNS))
            chunks.append(summarize(pa.Table.from_batches(batches)))
    totals: dict[str, int] = build_report(audit_all(pa.Table.from_batches(chunks)))["totals"]
    return totals


def test_kernel_on_clean_and_faulty_logs(tmp_path: Path) -> None:
    clean_log(tmp_path / "clean")
    totals = kernel_audit(tmp_path / "clean")
    assert totals["records"] == 95 and totals["producers"] == 4 and totals["partitions"] == 4
    assert all(totals[k] == 0 for k in COUNTS[1:])
    faulty_log(tmp_path / "bad")
    for split in (None, 1, 4, 7):  # chunk boundaries anywhere: same verdict
        totals = kernel_audit(tmp_path / "bad", split)
        assert {k: totals[k] for k in COUNTS[:-1]} == {k: EXPECTED[k] for k in COUNTS[:-1]}, split
    base = baseline_audit(str(tmp_path / "bad"))
    assert {k: base[k] for k in COUNTS[:-1]} == {k: EXPECTED[k] for k in COUNTS[:-1]}
    fast = vectorized_audit(str(tmp_path / "bad"))
    assert {k: fast[k] for k in COUNTS[:-1]} == {k: EXPECTED[k] for k in COUNTS[:-1]}
    assert fast["producers"] == 5
    clean = vectorized_audit(str(tmp_path / "clean"), first_sequence=0)
    assert clean == {"records": 95, "producers": 4, "missing": 0, "duplicates": 0, "order_violations": 0}
    # every producer starts at 0: two more missing each when sequences should start at -2
    assert vectorized_audit(str(tmp_path / "bad"), first_sequence=-2)["missing"] == 1 + 5 * 2


@pytest.mark.spark
def test_spark_audit_catches_planted_faults(spark: SparkSession, tmp_path: Path) -> None:
    faulty_log(tmp_path / "log")
    send_logs = write_send_logs(tmp_path / "sent")
    result = run_audit(spark, {"path": str(tmp_path / "log")}, send_logs)
    report = build_report(result)
    assert report["verdict"] == "FAIL"
    assert {k: report["totals"][k] for k in COUNTS} == EXPECTED
    assert report["totals"]["acked"] == 56
    by_producer = {p["producer_id"]: p for p in report["problems"]}
    assert set(by_producer) == {"a", "c", "d"}
    assert {"kind": "gap", "from": 7, "to": 7} in by_producer["a"]["samples"]
    assert {"kind": "acked-missing", "from": 7, "to": 7} in by_producer["a"]["samples"]
    assert {"kind": "acked-missing", "from": 25, "to": 25} in by_producer["c"]["samples"]
    order = [s for s in by_producer["c"]["samples"] if s["kind"] == "order"]
    assert order == [
        {"kind": "order", "partition": "fixed-1", "seq": 10, "prev_seq": 11, "offset": 11, "prev_offset": 10}
    ]
    base = baseline_audit(str(tmp_path / "log"), send_logs)
    assert {k: base[k] for k in COUNTS} == EXPECTED

    # Through the data source itself, with each partition split into small chunks.
    split = run_audit(
        spark, {"path": str(tmp_path / "log"), "offsetsPerSplit": "6"}, send_logs, via="datasource"
    )
    assert {k: build_report(split)["totals"][k] for k in COUNTS} == EXPECTED
    # Shuffled per-producer step (as for big findings) agrees with the driver-side merge.
    shuffled = run_audit(spark, {"path": str(tmp_path / "log")}, send_logs, driver_merge_limit=0)
    assert {k: build_report(shuffled)["totals"][k] for k in COUNTS} == EXPECTED


@pytest.mark.spark
def test_cli_verdicts(spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    clean_log(tmp_path / "log")
    (tmp_path / "sent.csv").write_text("".join(f"c,{s}\n" for s in range(25)))
    report_path = tmp_path / "report.json"
    code = main(
        ["--export", str(tmp_path / "log"), "--send-log", str(tmp_path / "sent.csv"),
         "--report", str(report_path), "--first-sequence", "0"]
    )  # fmt: skip
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert code == 0
    assert last.startswith("verdict=PASS records=95 producers=4 partitions=4 missing=0 duplicates=0")
    assert "acked=25 acked_missing=0" in last
    report = json.loads(report_path.read_text())
    assert report["verdict"] == "PASS" and report["totals"]["records"] == 95

    faulty_log(tmp_path / "bad")
    code = main(["--export", str(tmp_path / "bad"), "--report", str(report_path)])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert code == 1
    assert last.startswith("verdict=FAIL records=99 producers=5 partitions=4 missing=1 duplicates=2")
    assert json.loads(report_path.read_text())["verdict"] == "FAIL"
