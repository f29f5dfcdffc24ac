"""Small helpers for tests that drive the local cluster (and other servers on loopback)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(check: Callable[[], T | None], timeout: float, what: str, interval: float = 0.25) -> T:
    """Poll `check` until it returns a truthy value (returned); AssertionError after `timeout`s."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")
        time.sleep(interval)


# Another program on the machine: it binds the given port numbers the way a free-port pick does
# (no SO_REUSEADDR: the kernel's conflict rule for a port-0 pick is the one for that bind) and
# serves whatever it got until its stdin closes.
_SQUAT = """
import socket, sys
held = []
for port in map(int, sys.argv[1:]):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
        s.listen()
        held.append(s)
        print("took", port, flush=True)
    except OSError:
        print("refused", port, flush=True)
print("done", flush=True)
sys.stdin.read()
"""


def squat(ports: list[int]) -> tuple[subprocess.Popen[str], list[int]]:
    """Another program tries to serve ``ports``; returns it (``let_go`` ends it) and the ports it got."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _SQUAT, *map(str, ports)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    took = []
    for line in proc.stdout:
        if line.startswith("done"):
            break
        if line.startswith("took"):
            took.append(int(line.split()[1]))
    return proc, took


def let_go(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None
    proc.stdin.close()
    proc.wait(10)
