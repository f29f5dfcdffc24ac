"""Starting and stopping background processes, each in its own process group.

Every process the local cluster starts (control plane, node agent, containers) carries the
environment variable `LOCALCLUSTER_MARKER=<cluster id>`, so that `down` can find stragglers of
*this* cluster, and only of this cluster, even when a pidfile is stale.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

MARKER_ENV = "LOCALCLUSTER_MARKER"


@dataclass(frozen=True)
class ProcessRecord:
    """Identity of a started process: pid plus start time guards against pid reuse."""

    name: str
    pid: int
    create_time: float

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> ProcessRecord:
        return cls(str(data["name"]), int(str(data["pid"])), float(str(data["create_time"])))

    def process(self) -> psutil.Process | None:
        """The live process, or None if it exited (or its pid now belongs to someone else)."""
        try:
            proc = psutil.Process(self.pid)
            if abs(proc.create_time() - self.create_time) > 1.0:
                return None
            if proc.status() == psutil.STATUS_ZOMBIE:
                return None
            return proc
        except psutil.Error:
            return None

    def alive(self) -> bool:
        return self.process() is not None


def spawn(
    name: str,
    argv: Sequence[str],
    log_path: Path,
    env: Mapping[str, str],
    cwd: Path | None = None,
) -> tuple[subprocess.Popen[bytes], ProcessRecord]:
    """Start `argv` in a new session (its own process group), output appended to `log_path`."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env),
            cwd=str(cwd) if cwd else None,
            start_new_session=True,
        )
    try:
        create_time = psutil.Process(proc.pid).create_time()
    except psutil.Error:
        create_time = time.time()
    return proc, ProcessRecord(name, proc.pid, create_time)


def signal_group(pid: int, sig: int) -> None:
    """Send `sig` to the process group led by `pid` (and to `pid` itself if the group is gone)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def _group_members(pgid: int) -> list[psutil.Process]:
    members = []
    for proc in psutil.process_iter(["pid"]):
        # Any process on the machine may end between being listed and being asked its group:
        # `os.getpgid` then raises ProcessLookupError, an OSError, not a psutil.Error.
        with contextlib.suppress(psutil.Error, OSError):
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                members.append(proc)
    return members


def stop_group(record: ProcessRecord, grace: float = 10.0) -> None:
    """SIGTERM the process group of `record`, wait up to `grace` seconds, then SIGKILL it."""
    proc = record.process()
    if proc is None:
        return
    signal_group(record.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not record.alive() and not _group_members(record.pid):
            return
        time.sleep(0.05)
    signal_group(record.pid, signal.SIGKILL)
    with contextlib.suppress(psutil.Error):
        proc.wait(timeout=5)
    for member in _group_members(record.pid):
        with contextlib.suppress(psutil.Error):
            member.kill()


def processes_with_marker(marker: str) -> list[psutil.Process]:
    """Live processes whose environment carries `LOCALCLUSTER_MARKER=<marker>`."""
    found = []
    me = os.getpid()
    for proc in psutil.process_iter(["pid"]):
        if proc.pid == me:
            continue
        with contextlib.suppress(psutil.Error):
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if proc.environ().get(MARKER_ENV) == marker:
                found.append(proc)
    return found


def kill_all(processes: Iterable[psutil.Process], grace: float = 3.0) -> None:
    """SIGTERM, wait up to `grace` seconds, then SIGKILL whatever is left."""
    procs = list(processes)
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _, alive = psutil.wait_procs(procs, timeout=grace)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(alive, timeout=5)
