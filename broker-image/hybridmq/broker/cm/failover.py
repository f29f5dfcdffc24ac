"""``FailoverConnectionManager``: the CM, plus fast re-routing when a partition changes primary.

Produce requests the CM forwarded to an MM that is no longer the primary of their partition would
wait for ever if that MM is frozen (SIGSTOP, a long GC pause, a half-open network): the client only
resends after an error. So when a new assignment table moves a partition's primary away from an MM,
the CM drops its link to that MM: every request pending on it fails at once (MM_UNAVAILABLE, which
the producer resends, now to the new primary at the new epoch; the sequence numbers drop what was
stored twice). The link reconnects by itself and replays the subscriptions.
"""

from __future__ import annotations

import logging

from hybridmq.broker.cm.server import ConnectionManager

log = logging.getLogger(__name__)


class FailoverConnectionManager(ConnectionManager):
    _primaries: dict[str, str | None]

    async def start(self) -> None:
        await super().start()  # starts the source: the first table is in
        self._primaries = {n: a.primary for n, a in self.source.partitions().items()}
        self.source.subscribe(self._on_table)

    def _on_table(self) -> None:
        table = self.source.partitions()
        demoted: set[str] = set()
        for name, a in table.items():
            old = self._primaries.get(name)
            if old is not None and old != a.primary:
                demoted.add(old)
        self._primaries = {n: a.primary for n, a in table.items()}
        for mm in sorted(demoted):
            link = self.links.get(mm)
            if link is not None and link.conn is not None and not link.conn.closed:
                log.info("%s is no longer primary of some partitions: resetting the link", mm)
                link.conn.close()
