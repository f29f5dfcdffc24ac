"""Giving the heap a burst of work freed back to the operating system.

Placing thousands of partitions, or failing over a large MM, parses and drops tens of thousands of
objects at once (status-write answers, watch events, plans). CPython frees them into the C
library's malloc, whose arenas keep the pages: the RSS stays at the burst's peak long after the
cluster settled. glibc's ``malloc_trim(0)`` returns every wholly free page to the OS; nothing live
moves. Where the C library has no ``malloc_trim`` (musl), nothing is done.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

# Changes applied since the last trim after which a settled round trims (a placement, a large
# failover; not the odd figure update).
TRIM_AFTER_CHANGES = 200


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    return trim


_TRIM = _malloc_trim()


def release_freed_memory() -> bool:
    """Return the heap's free pages to the OS; whether the C library could (call it in a worker
    thread: it walks every malloc arena)."""
    if _TRIM is None:
        return False
    _TRIM(0)
    return True


class AfterBursts:
    """Whether a round should trim: it left the cluster settled, and at least ``after`` changes were
    applied since the last trim."""

    def __init__(self, after: int = TRIM_AFTER_CHANGES) -> None:
        self.after = after
        self.changes = 0

    def due(self, changes: int, settled: bool) -> bool:
        self.changes += changes
        if settled and self.changes >= self.after:
            self.changes = 0
            return True
        return False
