"""The suite's own time report: wall time per test directory at the end of a run, and (when
``HYBRIDMQ_TESTS_RECORD`` is set, as ``make test`` does) one JSON line per run appended to
``bench/results/tests.jsonl``: commit, seconds per directory, total, outcome counts."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "tests.jsonl"


class DirectoryClock:
    """Seconds spent in each test directory (setup, call and teardown of its tests)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.tests: dict[str, int] = defaultdict(int)
        self.outcomes: dict[str, int] = defaultdict(int)
        self.started = time.monotonic()

    def add(self, report: pytest.TestReport) -> None:
        parts = Path(report.nodeid.split("::")[0]).parts
        directory = "/".join(parts[:2]) if len(parts) > 2 else parts[0] if parts else "?"
        self.seconds[directory] += report.duration
        if report.when == "call":
            self.tests[directory] += 1
        if report.when == "call" or report.outcome != "passed":
            # an error in setup or teardown counts, a skip in setup counts as skipped
            key = "error" if report.failed and report.when != "call" else report.outcome
            self.outcomes[key] += 1


_clock = DirectoryClock()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _clock.add(report)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _clock.seconds:
        return
    total = time.monotonic() - _clock.started
    terminalreporter.section("time per test directory")
    for directory, seconds in sorted(_clock.seconds.items(), key=lambda kv: -kv[1]):
        terminalreporter.write_line(f"{directory:<24} {seconds:8.1f} s  {_clock.tests[directory]:5d} tests")
    terminalreporter.write_line(f"{'total (wall)':<24} {total:8.1f} s")
    if os.environ.get("HYBRIDMQ_TESTS_RECORD"):
        _record(total)


def _record(total: float) -> None:
    try:
        commit = subprocess.run(
            ["git", "-C", str(ROOT), "describe", "--always", "--dirty"], capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        commit = "?"
    line = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "commit": commit,
        "ci": bool(os.environ.get("CI")),
        "total_s": round(total, 1),
        "dirs_s": {d: round(s, 1) for d, s in sorted(_clock.seconds.items())},
        "outcomes": dict(_clock.outcomes),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    with RESULTS.open("a") as f:
        f.write(json.dumps(line) + "\n")
