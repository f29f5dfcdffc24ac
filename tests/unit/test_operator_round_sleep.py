"""The reconcile daemon's sleep between rounds: what ends it, and what may not end it too early."""

from __future__ import annotations

import asyncio
import time

from hybridmq_operator.handlers.partitions import sleep_between_rounds


async def _timed(
    delay: float, not_before_in: float, *, wake_at: float = -1, change_at: float = -1, stop_at: float = -1
) -> float:
    wake, changed, stop = asyncio.Event(), asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()
    for at, event in ((wake_at, wake), (change_at, changed), (stop_at, stop)):
        if at >= 0:
            loop.call_later(at, event.set)
    started = time.monotonic()
    await sleep_between_rounds(wake, changed, stop.wait(), delay, started + not_before_in)
    return time.monotonic() - started


async def test_nothing_happens_the_whole_delay_is_slept() -> None:
    assert 0.3 <= await _timed(0.3, 0.1) < 0.5


async def test_a_pod_event_ends_the_sleep_at_once() -> None:
    assert await _timed(5.0, 1.0, wake_at=0.05) < 0.3


async def test_a_change_ends_a_long_sleep_but_not_before_the_round_interval() -> None:
    took = await _timed(5.0, 0.4, change_at=0.05)
    assert 0.4 <= took < 0.7
    # Once the interval has passed, a change ends the sleep at once.
    assert await _timed(5.0, 0.1, change_at=0.3) < 0.5


async def test_a_pod_event_after_a_change_still_ends_it_at_once() -> None:
    assert await _timed(5.0, 2.0, change_at=0.05, wake_at=0.1) < 0.4


async def test_a_stopped_daemon_does_not_sleep_on() -> None:
    assert await _timed(5.0, 2.0, stop_at=0.05) < 0.3
    assert await _timed(5.0, 2.0, change_at=0.05, stop_at=0.1) < 0.4
