"""Summarizing repeated log records, so that a flood costs a counter, not a line (or a write) each.

``RepeatSummarizer`` is a ``logging.Filter`` put on every handler of a broker process (stderr and
the ``topic:_LOG`` buffer). Records are grouped by logger, level and message *template* (the
unformatted ``msg``, so "protocol error from %s" from a thousand peers is one group). In each
``interval`` the first ``burst`` records of a group pass; the others are only counted. ``tick()``
(called by the process's log publisher every half second) ends the intervals that are over: a group
that had records suppressed gets one summary record, "N more like this in the last T s: <the
template>", carrying ``repeated=N``, and stays suppressed for another interval (a continuing flood
gives one summary per interval); a quiet group is forgotten, so its next record passes again.

Memory is bounded: at most ``max_keys`` groups are tracked; records of further templates while the
table is full are counted together and summarized as one "other" group.

A record goes through several handlers: the verdict is decided once and kept on the record
(``hmq_pass``), so every handler shows or hides the same records.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

DEFAULT_INTERVAL_S = 10.0
DEFAULT_BURST = 5
DEFAULT_MAX_KEYS = 1024
OVERFLOW_LOGGER = "hybridmq"

Key = tuple[str, int, str]


@dataclass
class _Group:
    start: float
    passed: int = 0
    suppressed: int = 0


class RepeatSummarizer(logging.Filter):
    def __init__(
        self,
        interval: float = DEFAULT_INTERVAL_S,
        burst: int = DEFAULT_BURST,
        max_keys: int = DEFAULT_MAX_KEYS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.interval = interval
        self.burst = burst
        self.max_keys = max_keys
        self.clock = clock
        self._groups: dict[Key, _Group] = {}
        self._overflow = _Group(clock())
        self._lock = threading.Lock()  # records may come from executor threads
        self.suppressed_total = 0

    def filter(self, record: logging.LogRecord) -> bool:
        verdict = getattr(record, "hmq_pass", None)
        if verdict is not None:
            return bool(verdict)
        verdict = True if self.interval <= 0 else self._admit(record)
        record.hmq_pass = verdict
        return verdict

    def _admit(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.levelno, str(record.msg))
        now = self.clock()
        with self._lock:
            group = self._groups.get(key)
            if group is None:
                if len(self._groups) >= self.max_keys:
                    self._overflow.suppressed += 1
                    self.suppressed_total += 1
                    return False
                group = self._groups[key] = _Group(now)
            if group.passed < self.burst:
                group.passed += 1
                return True
            group.suppressed += 1
            self.suppressed_total += 1
            return False

    def due(self) -> list[logging.LogRecord]:
        """End the intervals that are over; the summary records of the groups that had more."""
        now = self.clock()
        out: list[logging.LogRecord] = []
        with self._lock:
            for key, group in list(self._groups.items()):
                if now - group.start < self.interval:
                    continue
                if group.suppressed == 0:
                    del self._groups[key]
                    continue
                name, level, template = key
                out.append(_summary(name, level, group.suppressed, now - group.start, template))
                # still flooding: the next interval starts suppressed (one summary per interval)
                self._groups[key] = _Group(now, passed=self.burst)
            if now - self._overflow.start >= self.interval:
                if self._overflow.suppressed:
                    elapsed = now - self._overflow.start
                    out.append(
                        _summary(
                            OVERFLOW_LOGGER,
                            logging.WARNING,
                            self._overflow.suppressed,
                            elapsed,
                            f"log records of more than {self.max_keys} kinds",
                        )
                    )
                self._overflow = _Group(now)
        return out

    def tick(self) -> int:
        """Log the summaries that are due through their own loggers; how many."""
        records = self.due()
        for record in records:
            logging.getLogger(record.name).handle(record)
        return len(records)


def _summary(name: str, level: int, count: int, elapsed: float, template: str) -> logging.LogRecord:
    record = logging.LogRecord(
        name,
        level,
        "",
        0,
        "%d more like this in the last %.0f s: %s",
        (count, elapsed, template),
        None,
    )
    record.repeated = count
    record.hmq_pass = True
    return record


_shared: RepeatSummarizer | None = None


def shared_summarizer() -> RepeatSummarizer:
    """The process's summarizer (one per process: every handler must share its counts)."""
    global _shared
    if _shared is None:
        _shared = RepeatSummarizer()
    return _shared


def configure(interval: float = DEFAULT_INTERVAL_S, burst: int = DEFAULT_BURST) -> RepeatSummarizer:
    """Set the process's summarizer and put it on every handler of the root logger (stderr)."""
    summarizer = shared_summarizer()
    summarizer.interval = interval
    summarizer.burst = burst
    for handler in logging.getLogger().handlers:
        if summarizer not in handler.filters:
            handler.addFilter(summarizer)
    return summarizer
