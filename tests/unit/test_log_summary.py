"""``RepeatSummarizer``: a flood of one message becomes its first records and one summary per
interval; memory stays bounded. Driven through a real logger and handler with a fake clock."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from hybridmq.broker.log_summary import RepeatSummarizer


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[tuple[str, int | None]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((record.getMessage(), getattr(record, "repeated", None)))


Setup = tuple[logging.Logger, RepeatSummarizer, Capture, Capture, Clock]


@pytest.fixture
def setup() -> Iterator[Setup]:
    clock = Clock()
    summarizer = RepeatSummarizer(interval=10, burst=3, max_keys=4, clock=clock)
    logger = logging.getLogger("hybridmq.test.summary")
    logger.setLevel(logging.INFO)
    top = logging.getLogger("hybridmq")  # where the overflow summary is logged
    first, second = Capture(), Capture()
    for h in (first, second):
        h.addFilter(summarizer)
        top.addHandler(h)
    yield logger, summarizer, first, second, clock
    for h in (first, second):
        top.removeHandler(h)


def test_flood_becomes_first_records_and_one_summary_per_interval(setup: Setup) -> None:
    logger, summarizer, first, second, clock = setup
    for i in range(1000):
        logger.warning("bad peer %s", f"10.0.0.{i % 250}")
    assert [m for m, _ in first.lines] == ["bad peer 10.0.0.0", "bad peer 10.0.0.1", "bad peer 10.0.0.2"]
    assert second.lines == first.lines  # every handler shows the same records
    assert summarizer.tick() == 0  # the interval is not over yet
    clock.now += 10
    assert summarizer.tick() == 1
    message, repeated = first.lines[-1]
    assert repeated == 997
    assert message == "997 more like this in the last 10 s: bad peer %s"
    # the flood goes on: still suppressed, one summary for the next interval
    for _ in range(50):
        logger.warning("bad peer %s", "x")
    clock.now += 10
    summarizer.tick()
    assert first.lines[-1][1] == 50 and len(first.lines) == 5
    # a quiet interval ends it: the next record is shown again
    clock.now += 10
    assert summarizer.tick() == 0
    logger.warning("bad peer %s", "back")
    assert first.lines[-1] == ("bad peer back", None)


def test_other_messages_pass_during_a_flood(setup: Setup) -> None:
    logger, _, first, _, _ = setup
    for _ in range(100):
        logger.warning("flood %d", 1)
    logger.warning("something else")
    logger.error("flood %d", 1)  # another level is another group
    assert ("something else", None) in first.lines and ("flood 1", None) in first.lines[-1:]


def test_bounded_number_of_groups(setup: Setup) -> None:
    logger, summarizer, first, _, clock = setup
    for i in range(100):
        logger.warning(f"distinct {i}")  # a template per record: the worst case
    assert len(first.lines) == 4  # max_keys groups tracked, the others only counted
    clock.now += 10
    summarizer.tick()
    assert first.lines[-1] == ("96 more like this in the last 10 s: log records of more than 4 kinds", 96)
    clock.now += 10
    summarizer.tick()  # quiet groups are forgotten
    logger.warning("distinct 99")
    assert first.lines[-1] == ("distinct 99", None)


def test_interval_zero_turns_it_off() -> None:
    summarizer = RepeatSummarizer(interval=0)
    records = [logging.LogRecord("x", logging.WARNING, "", 0, "m", None, None) for _ in range(50)]
    assert all(summarizer.filter(r) for r in records)
