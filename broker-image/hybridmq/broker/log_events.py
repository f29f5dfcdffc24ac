"""Publishing each process's log events to ``topic:_LOG``.

``LogEventBuffer`` is a logging handler that keeps the last ``capacity`` records (older ones are
dropped, so logging never blocks or grows memory); ``take_blob`` packs what accumulated into ONE
records blob (the client format: ``[value, key, headers, timestamp_ms]``, value = a JSON object with
node, level, logger and message) that the CM forwards or the MM appends like any producer batch.
"""

from __future__ import annotations

import json
import logging
from collections import deque

import msgpack


class LogEventBuffer(logging.Handler):
    def __init__(self, node: str, role: str, capacity: int = 1000, level: int = logging.INFO) -> None:
        super().__init__(level)
        self.node = node
        self.role = role
        self.records: deque[list[object]] = deque(maxlen=capacity)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            value = json.dumps(
                {
                    "node": self.node,
                    "role": self.role,
                    "level": record.levelname,
                    "logger": record.name,
                    "message": record.getMessage(),
                }
            ).encode()
            self.records.append([value, self.node.encode(), None, int(record.created * 1000)])
        except Exception:
            self.handleError(record)

    def take_blob(self) -> tuple[int, bytes] | None:
        if not self.records:
            return None
        items = list(self.records)
        self.records.clear()
        return len(items), msgpack.packb(items, use_bin_type=True)

    def install(self) -> LogEventBuffer:
        logging.getLogger("hybridmq").addHandler(self)
        return self

    def remove(self) -> None:
        logging.getLogger("hybridmq").removeHandler(self)
