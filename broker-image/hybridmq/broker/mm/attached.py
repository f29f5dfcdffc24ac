"""Which producers may still need a partition: the ``producers`` figure of the MM's report.

The CM opens producers (OPEN_PRODUCER) without telling the MM, so the MM counts what it sees: an
idempotent producer id is *attached* while it has written here within ``idle_s``. A new primary
(a takeover) has seen no write yet, so every producer id of the replicated producer-sequence table
counts as attached from the takeover on. A producer that moves away asks this partition what it
stores of its ids (FETCH_META ``pids``) before it resends anything elsewhere; that answer is its
detach: the id no longer counts. The operator deletes a draining on-demand partition only while
nothing is attached, so a moving producer's "what did you store" question is always answered.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

# Longer than a moving producer needs to ask (its in-flight wait plus its state-query retries).
PRODUCER_IDLE_S = 30.0


class AttachedProducers:
    def __init__(self, idle_s: float = PRODUCER_IDLE_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.idle_s = idle_s
        self._clock = clock
        self._seen: dict[int, float] = {}

    def seen(self, producer_ids: Iterable[int]) -> None:
        """These producers wrote here (or, at a takeover, are known to have)."""
        now = self._clock()
        for pid in producer_ids:
            if pid >= 0:
                self._seen[pid] = now

    def detached(self, producer_ids: Iterable[int]) -> None:
        """These producers asked what is stored of them: they have moved away."""
        for pid in producer_ids:
            self._seen.pop(pid, None)

    def count(self) -> int:
        horizon = self._clock() - self.idle_s
        for pid in [p for p, t in self._seen.items() if t < horizon]:
            del self._seen[pid]
        return len(self._seen)
