"""``python -m hybridmq.spark.audit`` (and ``hybridmq audit``): check a run's delivery guarantees.

Checks, over every partition of a cluster or an exported log: per-producer order in fixed
partitions, no gap in any producer's sequence (loss), no duplicate (producer id, sequence), and,
with ``--send-log``, that every acknowledged message is present. Writes a JSON report and prints a
short verdict whose last line is ``verdict=PASS ...`` or ``verdict=FAIL ...``. Exit status 0 on
PASS, 1 on FAIL, 2 on usage errors.
"""

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="hybridmq audit", description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--export", metavar="DIR", help="exported log directory (hybridmq.spark.export)")
    where.add_argument("--bootstrap", metavar="HOST:PORT", help="a connection manager of a running cluster")
    parser.add_argument(
        "--send-log",
        action="append",
        default=[],
        metavar="PATH",
        help="acked (producer_id,sequence) CSV file or directory from a producer; repeatable",
    )
    parser.add_argument(
        "--report", default="audit-report.json", help="JSON report path (default %(default)s)"
    )
    parser.add_argument(
        "--first-sequence",
        type=int,
        default=None,
        help="every producer's first sequence (e.g. 0): also count a missing head as loss",
    )
    parser.add_argument("--offsets-per-split", type=int, default=None, help="split big partitions into tasks")
    parser.add_argument("--master", default="local[2]", help="Spark master (default %(default)s)")
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra source option (the audit sets failOnDataLoss=false: records that are gone when"
        " it reads are reported as missing, not a crash)",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    options: dict[str, str] = {"path": args.export} if args.export else {"bootstrap": args.bootstrap}
    # The audit's job is to report lost records (missing, acked_missing), so reading goes on past
    # a partition collected between listing and reading instead of failing the whole audit.
    options["failOnDataLoss"] = "false"
    if args.offsets_per_split:
        options["offsetsPerSplit"] = str(args.offsets_per_split)
    for item in args.option:
        key, sep, value = item.partition("=")
        if not sep:
            print(f"--option needs KEY=VALUE, got {item!r}", file=sys.stderr)
            return 2
        options[key] = value

    from pyspark.sql import SparkSession

    from hybridmq.spark.audit.job import run_audit
    from hybridmq.spark.audit.report import build_report, verdict_line
    from hybridmq.spark.session import build_session

    owned = SparkSession.getActiveSession() is None  # inside a Spark application: leave it running
    started = time.perf_counter()
    spark = build_session(master=args.master, app_name="hybridmq-audit")
    session_s = time.perf_counter() - started
    try:
        began = time.perf_counter()
        result = run_audit(spark, options, args.send_log, args.first_sequence)
        audit_s = time.perf_counter() - began
    finally:
        if owned:
            spark.stop()
    report = build_report(
        result,
        {
            "source": options,
            "send_logs": args.send_log,
            "audit_s": round(audit_s, 3),
            "session_s": round(session_s, 3),
        },
    )
    Path(args.report).write_text(json.dumps(report, indent=2))
    totals = report["totals"]
    print(f"audited {totals['records']} records of {totals['producers']} producers in {audit_s:.1f}s")
    for problem in report["problems"][:10]:
        counts = ", ".join(
            f"{k}={problem[k]}" for k in ("missing", "duplicates", "order_violations", "acked_missing")
        )
        print(f"  producer {problem['producer_id']}: {counts}")
    print(f"report: {args.report}")
    print(verdict_line(report))
    return 0 if report["verdict"] == "PASS" else 1
