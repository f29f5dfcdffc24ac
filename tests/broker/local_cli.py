"""``hybridmq local`` as a user runs it: the installed entry point in a subprocess, checked from outside.

``running_local(directory, *options)`` (a context manager; ``start_local`` without it) runs
``<venv>/bin/hybridmq local <options> --dir <directory> --port 0`` and waits for its startup line;
``LocalRun`` holds it, runs further ``hybridmq`` commands (``cli``, ``local``) against it and stops
it (SIGTERM, as Ctrl-C would).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# The console script pip installed next to the interpreter that runs the tests (.venv/bin/hybridmq).
HYBRIDMQ = str(Path(sys.executable).parent / "hybridmq")
STARTUP = "hybridmq local: CMs at "
START_TIMEOUT_S = 120.0


def hybridmq(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """``hybridmq <args>`` to its end; stdout and stderr as text."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYBRIDMQ_")}
    return subprocess.run([HYBRIDMQ, *args], capture_output=True, text=True, timeout=timeout, env=env)


class LocalRun:
    def __init__(self, proc: subprocess.Popen[bytes], directory: Path, output: Path, startup: str) -> None:
        self.proc = proc
        self.dir = directory
        self.output = output
        self.startup = startup  # the startup line, as printed
        # "hybridmq local: CMs at 127.0.0.1:P[,127.0.0.1:Q...] (1 MMs)...": cm-0's address first
        self.bootstraps = startup.split()[4].split(",")
        self.bootstrap = self.bootstraps[0]

    def cli(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """A client command (``produce``, ``consume``, ``admin``) against cm-0 alone."""
        return hybridmq(*args, "--bootstrap", self.bootstrap, timeout=timeout)

    def local(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        """``hybridmq local <args> --dir <this run's directory>`` (kill, start, state)."""
        return hybridmq("local", *args, "--dir", str(self.dir), timeout=timeout)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def start_local(directory: Path, *options: str) -> LocalRun:
    """``hybridmq local <options> --dir <directory> --port 0``, once its startup line is out."""
    directory.mkdir(parents=True, exist_ok=True)
    output = directory.parent / f"{directory.name}.out"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYBRIDMQ_")}
    with open(output, "wb") as out:
        proc = subprocess.Popen(
            [HYBRIDMQ, "local", *options, "--dir", str(directory), "--port", "0"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        text = output.read_text(errors="replace")
        for line in text.splitlines():
            if line.startswith(STARTUP):
                return LocalRun(proc, directory, output, line)
        if proc.poll() is not None:
            raise AssertionError(f"hybridmq local exited with {proc.returncode}: {text[-2000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait(10)
            raise AssertionError(f"hybridmq local did not start in {START_TIMEOUT_S}s: {text[-2000:]}")
        time.sleep(0.1)


@contextmanager
def running_local(directory: Path, *options: str) -> Iterator[LocalRun]:
    """``start_local``, stopped at the end of the block."""
    run = start_local(directory, *options)
    try:
        yield run
    finally:
        run.stop()
