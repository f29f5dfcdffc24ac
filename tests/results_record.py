"""Figures the suite measures, kept under ``make test``: with ``HYBRIDMQ_TESTS_RECORD`` set (``make
test`` sets it), :func:`append` adds one JSON line to ``bench/results/<name>.jsonl`` with the
time, the commit and the machine's load, so that every run of the suite leaves its measurements
next to the benchmarks' (the test duration summary, the kind demo's failover times, the hostile
clients' latency ratio)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


def recording() -> bool:
    return bool(os.environ.get("HYBRIDMQ_TESTS_RECORD"))


def commit() -> str:
    """The short commit, ``-dirty`` when files other than bench/results changed (the suite itself
    appends there)."""
    try:
        head = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        changed = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--", ".", ":!bench/results"],
            capture_output=True,
            text=True,
        ).stdout.strip()
    except OSError:
        return "?"
    return head + ("-dirty" if changed else "")


def append(name: str, fields: dict[str, Any]) -> None:
    """One line to ``bench/results/<name>.jsonl`` when the suite records (else nothing)."""
    if not recording():
        return
    line = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "commit": commit(),
        "load": round(os.getloadavg()[0], 2),
        **fields,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    with (RESULTS / f"{name}.jsonl").open("a") as f:
        f.write(json.dumps(line) + "\n")
