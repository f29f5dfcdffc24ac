"""Totals, verdict and the JSON report of an audit from its per-producer rows."""

import json
from typing import Any

import pyarrow as pa

COUNTS = ("missing", "duplicates", "order_violations", "acked_missing")


def build_report(result: pa.Table, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    rows = sorted(result.to_pylist(), key=lambda r: str(r["producer_id"]))
    partitions: set[str] = set()
    for row in rows:
        partitions.update(json.loads(row["partitions"]))
    totals = {
        "records": sum(int(r["records"]) for r in rows),
        "distinct": sum(int(r["distinct"]) for r in rows),
        "producers": len(rows),
        "partitions": len(partitions),
        "acked": sum(int(r["acked"]) for r in rows),
    }
    for key in COUNTS:
        totals[key] = sum(int(r[key]) for r in rows)
    passed = all(totals[key] == 0 for key in COUNTS)
    problems = []
    for row in rows:
        if any(int(row[key]) for key in COUNTS):
            problems.append(
                {**row, "partitions": json.loads(row["partitions"]), "samples": json.loads(row["samples"])}
            )
    return {
        "verdict": "PASS" if passed else "FAIL",
        "totals": totals,
        "problems": problems,
        "producers": [
            {k: row[k] for k in ("producer_id", "records", "min_seq", "max_seq", "acked")}
            | {"partitions": json.loads(row["partitions"])}
            for row in rows
        ],
        **(extra or {}),
    }


def verdict_line(report: dict[str, Any]) -> str:
    t = report["totals"]
    return (
        f"verdict={report['verdict']} records={t['records']} producers={t['producers']}"
        f" partitions={t['partitions']} missing={t['missing']} duplicates={t['duplicates']}"
        f" order_violations={t['order_violations']} acked={t['acked']} acked_missing={t['acked_missing']}"
    )
