"""What every benchmark does with its figures: append them to ``bench/results/<name>.jsonl`` with what
the machine was doing, and end the output with one ``key=value`` line (what scripts and people read).

Each record carries ``bench``, ``time`` (UTC), ``commit`` (``git describe --always --dirty`` of this
checkout: figures are compared across changes), ``cpus``, ``python``, and the 1-minute load average
at the end (``loadavg_1m_after``) and, when the bench took it, at the start (``loadavg_1m_before``):
the machine is shared, and the other work on it skews the numbers.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def cpu_seconds(procs: Mapping[str, Any]) -> dict[str, float]:
    """User + system CPU seconds so far of each process (``psutil.Process``), by name: taken before
    and after a measurement, their difference over the wall time is the cores each one used."""
    return {name: sum(p.cpu_times()[:2]) for name, p in procs.items()}


def load_average() -> float:
    """The 1-minute load average now (take it before the run and pass it to ``append``)."""
    return round(os.getloadavg()[0], 2)


def git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--abbrev=12"],
            cwd=RESULTS.parent,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None  # not a checkout (or no git): the record is still worth keeping
    return out.stdout.strip() or None


def append(
    name: str,
    figures: Mapping[str, Any],
    summary: Mapping[str, Any],
    load_before: float | None = None,
    *,
    echo: bool = True,
) -> dict[str, Any]:
    """Append ``figures`` and the machine's context to ``results/<name>.jsonl``; print the record
    (unless ``echo`` is false) and then the ``summary`` as the last line, ``k=v`` pairs separated by
    spaces (format the values first). Returns the record."""
    record: dict[str, Any] = {
        "bench": name,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "commit": git_commit(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        **({"loadavg_1m_before": round(load_before, 2)} if load_before is not None else {}),
        **figures,
        "loadavg_1m_after": load_average(),
    }
    path = RESULTS / f"{name}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps(record) + "\n")
    if echo:
        print(json.dumps(record))
    print(" ".join(f"{k}={v}" for k, v in summary.items()), flush=True)
    return record
