"""Returning a burst's freed heap to the OS: when, and that it does."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from hybridmq_operator.memory import AfterBursts


def test_a_trim_waits_for_a_settled_round_after_enough_changes() -> None:
    bursts = AfterBursts(after=200)
    assert not bursts.due(150, settled=True)  # not enough changes yet
    assert not bursts.due(100, settled=False)  # enough, but still in flight
    assert bursts.due(0, settled=True)  # settled: trim once
    assert not bursts.due(0, settled=True)  # and not again without new changes
    assert not bursts.due(199, settled=True)
    assert bursts.due(1, settled=True)


# Run in a fresh interpreter: in the test process the heap already has free space from earlier
# tests, which the burst reuses, so how much it adds to the RSS depends on what ran before.
_BURST = """
import psutil
from hybridmq_operator.memory import release_freed_memory

process = psutil.Process()
base = process.memory_info().rss
# 200 MB of 4 KB buffers (malloc's, as parsed answers' larger parts are), all dropped but every
# 100th: free() keeps the pages, a live buffer sits above most of them.
burst = [bytes([i % 256]) * 4096 for i in range(50_000)]
kept = burst[::100]
del burst
held = process.memory_info().rss - base
trimmed = release_freed_memory()
released = process.memory_info().rss - base
print(held, released, trimmed, len(kept))
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_freed_heap_goes_back_to_the_os() -> None:
    out = subprocess.run([sys.executable, "-c", _BURST], capture_output=True, text=True, check=True)
    held, released, trimmed, kept = out.stdout.split()
    assert int(held) > 150 * 2**20  # what the test is about: the freed pages are still mapped
    assert trimmed == "True" and int(kept) == 500
    assert int(released) < int(held) / 2, (held, released)
