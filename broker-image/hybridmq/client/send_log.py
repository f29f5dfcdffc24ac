"""A producer's send log: one CSV line ``producer_id,sequence`` per acknowledged message.

``Producer.connect(..., send_log="run/p1.csv")`` (also ``BlockingProducer``) appends the lines of
every batch the brokers acknowledged, as soon as the ack arrives. The ids are the ones the brokers
store and ``hybridmq.client.Fetcher`` / the PySpark data source report: ``producer_id`` is the
producer's idempotence id (``pid``), suffixed ``.<producer epoch>`` when the epoch is not 0, and
``sequence`` is the batch's base sequence plus the record's index. ``hybridmq audit --send-log``
checks that every line's message is in the cluster.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, TextIO

SendLogTarget = str | Path | TextIO | None


def producer_key(pid: int, producer_epoch: int) -> str:
    return str(pid) if producer_epoch in (0, -1) else f"{pid}.{producer_epoch}"


class SendLog:
    def __init__(self, out: TextIO, owned: bool) -> None:
        self._out = out
        self._owned = owned

    @classmethod
    def open(cls, target: SendLogTarget) -> SendLog | None:
        if target is None:
            return None
        if isinstance(target, str | Path):
            path = Path(target)
            path.parent.mkdir(parents=True, exist_ok=True)
            return cls(path.open("a", encoding="ascii", buffering=io.DEFAULT_BUFFER_SIZE), True)
        return cls(target, False)

    def acked(self, frame: dict[str, Any]) -> None:
        """Record an acknowledged PRODUCE frame (its ``pid``, ``pep``, ``seq`` and ``n``)."""
        pid = frame.get("pid")
        seq = int(frame.get("seq", -1))
        if pid is None or int(pid) < 0 or seq < 0 or self._out.closed:
            return
        key = producer_key(int(pid), int(frame.get("pep", 0)))
        self._out.write("".join(f"{key},{s}\n" for s in range(seq, seq + int(frame["n"]))))
        self._out.flush()

    def close(self) -> None:
        if self._owned and not self._out.closed:
            self._out.close()
