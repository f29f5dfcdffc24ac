"""The audit: what the consumers received, checked by `hybridmq.spark.audit` against the send logs.

The consumed records (partition, offset, producer id, sequence) are written as an exported log
(`hybridmq.spark.export` format; a batch redelivered to a consumer has the same partition:offset and
is kept once; two *different* records received at one partition:offset are a conflict, reported
apart), then `python -m hybridmq.spark.audit --export ... --send-log ...` runs as a
subprocess (its own JVM, killed with its process group on timeout). The audit checks per-producer
order in fixed partitions, gaps, duplicates, and that every acknowledged record was delivered.
Its last line, ``verdict=PASS ...`` or ``verdict=FAIL ...``, is the demo's verdict.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from hybridmq_demo.load import ConsumedRecord
from hybridmq_demo.state import DemoState


@dataclass(frozen=True)
class ExportSummary:
    partitions: int
    records: int  # distinct (partition, offset) written to the export
    redelivered: int  # the same record at the same partition:offset received again: folded
    #: partition:offset received with two *different* records (the log changed under the consumer,
    #: e.g. a failover that truncated delivered records); the last one received is exported
    conflicts: dict[str, int]
    samples: list[str]
    #: (producer, sequence) stored at more than one partition:offset, e.g. "od-0/17 at p-0:5, p-1:2"
    duplicates: list[str]


@dataclass(frozen=True)
class AuditResult:
    passed: bool
    verdict: str  # the "verdict=..." line
    report: Path


def export_consumed(
    records: Iterable[ConsumedRecord], partition_types: dict[str, str], out: Path
) -> ExportSummary:
    """Write what the consumers received as an exported log at `out` (and `out`.csv, all of it)."""
    from hybridmq.spark.export import ExportWriter

    by_partition: dict[str, dict[int, ConsumedRecord]] = defaultdict(dict)
    redelivered = 0
    conflicts: dict[str, int] = defaultdict(int)
    samples: list[str] = []
    places: dict[tuple[str, int], set[tuple[str, int]]] = defaultdict(set)
    with out.with_suffix(".csv").open("w") as dump:
        dump.write("# partition,offset,producer_id,sequence,redelivered (in order of arrival)\n")
        for r in records:
            dump.write(f"{r.partition},{r.offset},{r.pid},{r.seq},{int(r.redelivered)}\n")
            places[(r.pid, r.seq)].add((r.partition, r.offset))
            rows = by_partition[r.partition]
            seen = rows.get(r.offset)
            if seen is not None and (seen.pid, seen.seq) == (r.pid, r.seq):
                redelivered += 1
                continue
            if seen is not None:
                conflicts[r.partition] += 1
                if len(samples) < 5:
                    samples.append(
                        f"{r.partition}:{r.offset} was {seen.pid}/{seen.seq}, then {r.pid}/{r.seq}"
                    )
            rows[r.offset] = r
    writer = ExportWriter(out)
    for name, rows in sorted(by_partition.items()):
        ptype = partition_types.get(name, "fixed" if "-fixed-" in name else "on-demand")
        writer.append_rows(
            name,
            ptype,
            [{"offset": off, "producer_id": r.pid, "sequence": r.seq} for off, r in sorted(rows.items())],
        )
    written = sum(len(rows) for rows in by_partition.values())
    duplicates = [
        f"{pid}/{seq} at " + ", ".join(f"{p}:{o}" for p, o in sorted(where))
        for (pid, seq), where in sorted(places.items())
        if len(where) > 1
    ]
    return ExportSummary(len(by_partition), written, redelivered, dict(conflicts), samples, duplicates)


def run_audit(
    state: DemoState, export_dir: Path, sendlog_dir: Path, report: Path, timeout: float = 300
) -> AuditResult:
    argv = [
        sys.executable,
        "-m",
        "hybridmq.spark.audit",
        "--export",
        str(export_dir),
        "--send-log",
        str(sendlog_dir),
        "--report",
        str(report),
        "--first-sequence",
        "0",
    ]
    spark_log = report.with_suffix(".spark.log")
    lines: list[str] = []
    with spark_log.open("w") as stderr:
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=stderr, text=True, start_new_session=True
        )

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                line = line.rstrip()
                if line:
                    lines.append(line)
                    state.emit(f"audit: {line}")

        reader = threading.Thread(target=read, name="audit-output", daemon=True)
        reader.start()
        started = time.monotonic()
        try:
            while proc.poll() is None:
                elapsed = time.monotonic() - started
                state.set_progress(f"Spark audit running ({elapsed:.0f}s; Spark log {spark_log})")
                if elapsed > timeout:
                    break
                time.sleep(0.5)
        finally:
            # Timed out, interrupted, or done: nothing of its session (the Spark JVM) stays behind.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if proc.returncode == -signal.SIGKILL and time.monotonic() - started > timeout:
            reader.join(2)
            return AuditResult(False, f"verdict=FAIL the audit did not finish in {timeout:.0f}s", report)
        reader.join(5)
    verdict = next((line for line in reversed(lines) if line.startswith("verdict=")), None)
    if verdict is None:
        tail = [t.strip() for t in spark_log.read_text(errors="replace").splitlines() if t.strip()][-2:]
        return AuditResult(
            False,
            f"verdict=FAIL the audit printed no verdict (exit {proc.returncode}): {' | '.join(tail)[:400]}",
            report,
        )
    return AuditResult(verdict.startswith("verdict=PASS") and proc.returncode == 0, verdict, report)
