"""Event handlers that run on every watch event of their kind, with their success not logged.

Kopf logs every run of an event handler at INFO ("Handler '...' succeeded."). For handlers that see
every Lease renewal or every Partition status write, that is a log line per event; their
failures (WARNING and above) are still logged.
"""

from __future__ import annotations

import logging

_SILENT: set[str] = set()


def silent(handler_id: str) -> str:
    """``handler_id``, whose successful runs are not logged: ``@kopf.on.event(..., id=silent("x"))``."""
    _SILENT.add(handler_id)
    return handler_id


class _SilentHandlers(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            return True
        message = record.getMessage()
        if not message.startswith("Handler '"):
            return True
        return message[len("Handler '") :].split("'", 1)[0] not in _SILENT


logging.getLogger("kopf.objects").addFilter(_SilentHandlers())
