"""The suite's scheduling over workers (``suite_schedule``) and its own time report.

Time report: seconds spent per test directory (setup, call and teardown of its tests, summed over
the workers), each worker's busy seconds and when it finished, how busy the machine's cores were and
its load before the run, and the run's wall time; with ``HYBRIDMQ_TESTS_RECORD`` set (as ``make
test`` does) one JSON line per run is appended to ``bench/results/tests.jsonl``. With
``HYBRIDMQ_TESTS_CPU=FILE``, each test's wall seconds and the machine's busy core-seconds meanwhile
go to FILE, one JSON line per test: run in one process, that says where the suite's CPU goes."""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

import results_record
import suite_schedule
from localcluster.pytest_plugin import release_local_cluster


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> suite_schedule.SuiteGroups | None:
    return suite_schedule.make_scheduler(config, log)


def pytest_configure_node(node: Any) -> None:
    suite_schedule.configure_node(node)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    suite_schedule.order_and_publish(config, items)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    yield
    # The control plane stops after its last test here, not at the session's end.
    if suite_schedule.last_of_group(item, nextitem, "local_cluster"):
        release_local_cluster(item.config)


def _directory(nodeid: str) -> str:
    parts = Path(nodeid.split("::")[0]).parts
    return "/".join(parts[:2]) if len(parts) > 2 else parts[0] if parts else "?"


_TICKS = os.sysconf("SC_CLK_TCK")  # /proc/stat's clock ticks per second


def _busy_jiffies() -> tuple[int, int]:
    """(busy, total) CPU time of the machine so far, in clock ticks (/proc/stat)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


class SuiteClock:
    """Seconds spent in each test directory and by each worker, and the machine's load."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.tests: dict[str, int] = defaultdict(int)
        self.outcomes: dict[str, int] = defaultdict(int)
        self.worker_busy: dict[str, float] = defaultdict(float)
        self.worker_done: dict[str, float] = {}
        self.started = time.monotonic()
        self.load_before = os.getloadavg()[0]
        self.jiffies_before = _busy_jiffies()

    def add(self, report: pytest.TestReport) -> None:
        directory = _directory(report.nodeid)
        self.seconds[directory] += report.duration
        worker = getattr(getattr(report, "node", None), "gateway", None)
        worker_id = getattr(worker, "id", "main")
        self.worker_busy[worker_id] += report.duration
        self.worker_done[worker_id] = time.monotonic() - self.started
        if report.when == "call":
            self.tests[directory] += 1
        if report.when == "call" or report.outcome != "passed":
            # an error in setup or teardown counts, a skip in setup counts as skipped
            key = "error" if report.failed and report.when != "call" else report.outcome
            self.outcomes[key] += 1

    def cores_busy(self) -> float:
        """Cores in use on average since the start (of os.cpu_count())."""
        busy, total = _busy_jiffies()
        busy0, total0 = self.jiffies_before
        return (busy - busy0) / max(1, total - total0) * (os.cpu_count() or 1)


_clock = SuiteClock()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _clock.add(report)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    """With ``HYBRIDMQ_TESTS_CPU`` naming a file, append each test's wall seconds and the machine's
    busy core-seconds meanwhile (setup to teardown): where the suite's CPU goes, when run alone."""
    out = os.environ.get("HYBRIDMQ_TESTS_CPU")
    if not out:
        yield
        return
    t0, (busy0, _) = time.monotonic(), _busy_jiffies()
    yield
    wall, busy = time.monotonic() - t0, _busy_jiffies()[0] - busy0
    with open(out, "a") as f:
        f.write(
            json.dumps({"test": item.nodeid, "wall_s": round(wall, 2), "cpu_s": round(busy / _TICKS, 2)})
            + "\n"
        )


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _clock.seconds or hasattr(terminalreporter.config, "workerinput"):  # the controller reports
        return
    total = time.monotonic() - _clock.started
    write = terminalreporter.write_line
    terminalreporter.section("time per test directory")
    for directory, seconds in sorted(_clock.seconds.items(), key=lambda kv: -kv[1]):
        write(f"{directory:<24} {seconds:8.1f} s  {_clock.tests[directory]:5d} tests")
    write("(a directory's seconds are its tests' own, summed over the workers)")
    for worker, busy in sorted(_clock.worker_busy.items()):
        ended = _clock.worker_done[worker]
        write(f"worker {worker:<17} {busy:8.1f} s in tests, its last one ended at {ended:.0f} s")
    cores = _clock.cores_busy()
    load = _clock.load_before
    write(f"machine: {cores:.2f} of {os.cpu_count()} cores busy on average, load {load:.2f} before")
    write(f"{'total (wall)':<24} {total:8.1f} s")
    if results_record.recording():
        workers = terminalreporter.config.getoption("numprocesses", None) or 0
        _record(total, workers, cores)


def _record(total: float, workers: int, cores: float) -> None:
    results_record.append(
        "tests",
        {
            "ci": bool(os.environ.get("CI")),
            "part": os.environ.get("HYBRIDMQ_TESTS_RECORD"),  # main, then solo (make test)
            "total_s": round(total, 1),
            "workers": workers,
            "load_before": round(_clock.load_before, 2),
            "cores_busy": round(cores, 2),
            "dirs_s": {d: round(s, 1) for d, s in sorted(_clock.seconds.items())},
            "workers_s": {w: round(s, 1) for w, s in sorted(_clock.worker_busy.items())},
            "outcomes": dict(_clock.outcomes),
        },
    )
