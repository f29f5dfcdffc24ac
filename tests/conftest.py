"""The suite's scheduling and its own time report.

Scheduling (``make test`` runs the suite in pytest-xdist workers with ``--dist loadgroup``): tests
that share one expensive thing are one group, run by one worker in file order. ``tests/k8s`` and
``tests/e2e`` share the local control plane; ``tests/images`` and ``tests/kind`` share the Docker
engine, the images built once and the kind cluster (node loss stays last); ``tests/spark`` shares one
SparkSession. Every other module is a group of its own, so its module-scoped broker cluster starts
once. Groups are handed out longest first, so the long serial groups start at once and the short
modules fill the other workers around them.

Time report: seconds spent per test directory (setup, call and teardown of its tests, summed over
workers) and the run's wall time at the end; with ``HYBRIDMQ_TESTS_RECORD`` set (as ``make test``
does) one JSON line per run is appended to ``bench/results/tests.jsonl``: commit, seconds per
directory, total, workers, outcome counts."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "tests.jsonl"

# Directories whose tests share a session-wide resource: one group each (see the module docstring).
SHARED_GROUPS = {
    "tests/k8s": "kubernetes",
    "tests/e2e": "kubernetes",
    "tests/images": "docker",
    "tests/kind": "docker",
    "tests/spark": "spark",
}
# The order groups are handed to workers: the long serial ones first (measured: the control plane's
# group takes about a third of the suite's test time), then directories by their share of it.
GROUP_ORDER = ["kubernetes", "docker", "tests/adversarial", "spark", "tests/broker", "tests/unit"]


def _directory(nodeid: str) -> str:
    parts = Path(nodeid.split("::")[0]).parts
    return "/".join(parts[:2]) if len(parts) > 2 else parts[0] if parts else "?"


def _group(nodeid: str) -> str:
    return SHARED_GROUPS.get(_directory(nodeid), nodeid.split("::")[0])


def _rank(group: str) -> int:
    for rank, prefix in enumerate(GROUP_ORDER):
        if group == prefix or group.startswith(prefix + "/"):
            return rank
    return len(GROUP_ORDER)


class SuiteGroups(LoadScopeScheduling):
    """xdist's scope scheduling with this suite's groups as the scopes: a group goes to one worker
    whole, and the groups are handed out in the order the workers collected them (sorted by rank in
    ``pytest_collection_modifyitems``). Our own because xdist's ``xdist_group`` mark does not take
    effect under pytest 9.2 (it renames the item's old ``_nodeid`` attribute)."""

    def __init__(self, config: pytest.Config, log: Any = None) -> None:
        config.option.loadscopereorder = False  # keep our order, not "most tests first"
        super().__init__(config, log)

    def _split_scope(self, nodeid: str) -> str:
        return _group(nodeid)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> SuiteGroups | None:
    return SuiteGroups(config, log) if config.getvalue("dist") == "loadgroup" else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if hasattr(config, "workerinput"):  # an xdist worker: its order is the order groups go out
        items.sort(key=lambda item: _rank(_group(item.nodeid)))  # stable: file order within a rank


class DirectoryClock:
    """Seconds spent in each test directory (setup, call and teardown of its tests)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.tests: dict[str, int] = defaultdict(int)
        self.outcomes: dict[str, int] = defaultdict(int)
        self.started = time.monotonic()

    def add(self, report: pytest.TestReport) -> None:
        directory = _directory(report.nodeid)
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
    if not _clock.seconds or hasattr(terminalreporter.config, "workerinput"):  # the controller reports
        return
    total = time.monotonic() - _clock.started
    terminalreporter.section("time per test directory")
    for directory, seconds in sorted(_clock.seconds.items(), key=lambda kv: -kv[1]):
        terminalreporter.write_line(f"{directory:<24} {seconds:8.1f} s  {_clock.tests[directory]:5d} tests")
    terminalreporter.write_line(f"{'total (wall)':<24} {total:8.1f} s")
    terminalreporter.write_line("(a directory's seconds are its tests' own, summed over the workers)")
    if os.environ.get("HYBRIDMQ_TESTS_RECORD"):
        _record(total, terminalreporter.config.getoption("numprocesses", None) or 0)


def _record(total: float, workers: int) -> None:
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
        "workers": workers,
        "dirs_s": {d: round(s, 1) for d, s in sorted(_clock.seconds.items())},
        "outcomes": dict(_clock.outcomes),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    with RESULTS.open("a") as f:
        f.write(json.dumps(line) + "\n")
