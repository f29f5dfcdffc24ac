"""Publishing each process's log events to ``topic:_LOG``.

``LogEventBuffer`` is a logging handler that keeps the last ``capacity`` records (older ones are
dropped and counted, so logging never blocks or grows memory); ``take_blob`` packs what accumulated
into ONE records blob (the client format: ``[value, key, headers, timestamp_ms]``, value = a JSON
object with node, role, level, logger, message and ``count``) that the MM appends to its internal
log partition, directly for its own events and through a PRODUCE from the CM for the CM's.

The buffer shares the process's ``RepeatSummarizer`` (``log_summary.py``) with the stderr handler: a
flood of one message becomes its first few records (``count`` 1) and then one summary per interval
whose ``count`` says how many records it stands for (``summary: true``).

Events never go to a user's partition: each MM hosts one internal partition, ``log_partition(mm)``
(``_log.<mm>``), that is not in the assignment table (``broker/mm/internal_log.py``).
"""

from __future__ import annotations

import json
import logging
from collections import deque

import msgpack

from hybridmq.broker.log_summary import RepeatSummarizer, shared_summarizer

LOG_PARTITION_PREFIX = "_log."


def log_partition(mm: str) -> str:
    """The internal partition on ``mm`` that holds its (and its CMs') ``topic:_LOG`` events."""
    return LOG_PARTITION_PREFIX + mm


def log_partition_owner(name: str) -> str | None:
    """The MM hosting internal log partition ``name``; None for any other name."""
    if name.startswith(LOG_PARTITION_PREFIX) and len(name) > len(LOG_PARTITION_PREFIX):
        return name[len(LOG_PARTITION_PREFIX) :]
    return None


class LogEventBuffer(logging.Handler):
    def __init__(
        self,
        node: str,
        role: str,
        capacity: int = 1000,
        level: int = logging.INFO,
        summarizer: RepeatSummarizer | None = None,
    ) -> None:
        super().__init__(level)
        self.node = node
        self.role = role
        self.records: deque[list[object]] = deque(maxlen=capacity)
        self.dropped = 0
        self.summarizer = summarizer or shared_summarizer()
        self.addFilter(self.summarizer)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            repeated = getattr(record, "repeated", None)
            event: dict[str, object] = {
                "node": self.node,
                "role": self.role,
                "level": record.levelname,
                "logger": record.name,
                "message": record.getMessage(),
                "count": int(repeated) if repeated is not None else 1,
            }
            if repeated is not None:
                event["summary"] = True
            value = json.dumps(event).encode()
            if len(self.records) == self.records.maxlen:
                self.dropped += 1
            self.records.append([value, self.node.encode(), None, int(record.created * 1000)])
        except Exception:
            self.handleError(record)

    def take_blob(self) -> tuple[int, bytes] | None:
        """Everything buffered, as one blob (call ``summarizer.tick()`` first: due summaries)."""
        items: list[list[object]] = []
        while self.records:  # popleft: a record emitted meanwhile (another thread) is kept
            items.append(self.records.popleft())
        if not items:
            return None
        return len(items), msgpack.packb(items, use_bin_type=True)

    def install(self) -> LogEventBuffer:
        logging.getLogger("hybridmq").addHandler(self)
        return self

    def remove(self) -> None:
        logging.getLogger("hybridmq").removeHandler(self)
