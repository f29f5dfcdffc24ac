"""``bench/rolling.py --kind``: the whole roll done by the operator on a kind cluster, with the images
built from our Dockerfiles, the chart installed and the producers in a Job on the cluster.

It runs the kind demo with ``FAILURE=roll`` (``hack/kind-demo.sh``: cluster, images, chart, a
BrokerCluster of 3 MMs and 2 CMs with 3 fixed partitions of 2 replicas and one on-demand partition
per MM, a fixed and an on-demand producer each awaiting every send at ``--rate`` messages a second,
the restart annotation, then the audit) and turns its last line into the bench's figures:
``failed_sends`` is 0 when the producers' Job completed (a producer exits on its first failed send,
which fails the Job and the demo), ``lost`` is the audit's ``acked_missing`` (acknowledged and not
stored), ``out_of_order`` its ``order_violations``; the stalls are how long each send waited, by
the part of the roll it began in (``hack/kind/roll.py stalls``).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "hack" / "kind-demo.sh"
STALL_KEYS = ("max_stall_ms", "p99_ms_during", "p99_ms_before", "max_stall_ms_cms", "p99_ms_cms", "roll_s")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def last_figures(output: str) -> dict[str, str]:
    """The ``key=value`` words of the last line that holds a verdict."""
    for line in reversed(ANSI.sub("", output).splitlines()):
        words = dict(w.split("=", 1) for w in line.split() if "=" in w)
        if "verdict" in words:
            return words
    return {}


def _number(value: str) -> float | int:
    return float(value) if "." in value else int(value)


def run_kind(args: argparse.Namespace) -> dict[str, object]:
    env = {
        **os.environ,
        "FAILURE": "roll",
        "RATE": str(int(args.rate)),
        "WARMUP_SECONDS": str(int(args.before)),
    }
    lines: list[str] = []
    with subprocess.Popen(
        ["bash", str(DEMO)], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as demo:
        assert demo.stdout is not None
        for line in demo.stdout:  # the demo's progress, as it happens
            sys.stdout.write(line)
            lines.append(line)
    figures = last_figures("".join(lines))
    if not figures or "max_stall_ms" not in figures:
        raise SystemExit(f"the kind roll demo failed (exit {demo.returncode}) before its verdict")
    return {
        "failed_sends": 0,
        "lost": int(figures["acked_missing"]),
        "out_of_order": int(figures["order_violations"]),
        "duplicates": int(figures["duplicates"]),
        "acked": int(figures["acked"]),
        "audit": figures["verdict"],
        **{k: _number(figures[k]) for k in STALL_KEYS},
        "max_stall_ms_kill": None,
        "mode": "kind",
    }
