"""Bounded waiting with progress, and the exception that fails a step with its reason."""

from __future__ import annotations

import time
from collections.abc import Callable

from hybridmq_demo.state import DemoState


class StepFailed(Exception):
    """A step of the demo could not be completed; the message is the reason shown in the verdict."""


Check = Callable[[], tuple[bool, str]]


def wait_until(state: DemoState, what: str, check: Check, timeout: float, interval: float = 0.5) -> float:
    """Poll `check` (returns (done, progress text)) until done; returns the seconds it took.

    The progress text is shown live; StepFailed(reason with the last progress) after `timeout`.
    `check` may raise StepFailed itself to fail fast (e.g. a pod in CrashLoopBackOff).
    """
    started = time.monotonic()
    deadline = started + timeout
    last = ""
    while True:
        done, last = check()
        elapsed = time.monotonic() - started
        state.set_progress(f"{what}: {last} ({elapsed:.0f}s/{timeout:.0f}s)")
        if done:
            state.emit(f"{what}: done in {elapsed:.1f}s ({last})")
            return elapsed
        if time.monotonic() >= deadline:
            raise StepFailed(f"{what}: not done after {timeout:.0f}s ({last})")
        time.sleep(interval)
