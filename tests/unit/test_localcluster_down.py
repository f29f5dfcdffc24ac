"""`python -m localcluster down` stops a cluster whose processes exit on their own while it stops
them, quietly, and a second `down` is a no-op (real processes, the real command).

The cluster's recorded processes are stand-ins: a "node agent" that exits on SIGTERM but leaves a
child in its process group that holds SIGTERM for a while (so `down` keeps looking through the
machine's processes for what is left of the group), and one more; meanwhile other short-lived
processes come and go on the machine, as they do when tests run side by side (the race is a
process that ends between being listed and being asked its group). The checker: the command's exit
status and output, and whether the stand-ins' pids still live.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

MARKER = "test-down-quietly"
# Exits on SIGTERM; its child (same process group) ignores it for 3 s: `down` polls the group.
LEAVES_A_CHILD = (
    "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', "
    "'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(3)']); "
    "time.sleep(60)"
)
CHURN = "end=$((SECONDS+5)); while [ $SECONDS -lt $end ]; do /bin/true; done"
CHURNERS = 3


def _spawn_recorded(name: str, code: str) -> dict[str, object]:
    env = dict(os.environ, LOCALCLUSTER_MARKER=MARKER)
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, start_new_session=True)
    return {"name": name, "pid": proc.pid, "create_time": psutil.Process(proc.pid).create_time()}


def _down(directory: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "localcluster", "down", "--dir", str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, PYTHONPATH=str(Path(__file__).parents[2] / "hack")),
    )


def test_down_is_quiet_when_processes_vanish_while_stopping(tmp_path: Path) -> None:
    records = [
        _spawn_recorded("node-agent", LEAVES_A_CHILD),
        _spawn_recorded("etcd", "import time; time.sleep(60)"),
    ]
    state = {"marker": MARKER, "api_port": 0, "bin_dir": None, "processes": records}
    (tmp_path / "state.json").write_text(json.dumps(state))
    time.sleep(0.5)  # the child has set its signal handler
    churn = [subprocess.Popen(["bash", "-c", CHURN]) for _ in range(CHURNERS)]
    try:
        first = _down(tmp_path)
    finally:
        for proc in churn:
            proc.wait(15)
    assert first.returncode == 0, first.stderr
    assert "Traceback" not in first.stderr and "Error" not in first.stderr, first.stderr
    for record in records:
        pid = int(str(record["pid"]))
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, record
    assert not (tmp_path / "state.json").exists()

    again = _down(tmp_path)
    assert again.returncode == 0, again.stderr
    assert "nothing to stop" in again.stderr and "Traceback" not in again.stderr, again.stderr
