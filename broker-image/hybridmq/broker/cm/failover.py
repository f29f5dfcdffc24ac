"""``FailoverConnectionManager``: the CM, plus fast re-routing when a partition changes primary.

Produce requests the CM forwarded to an MM that is no longer the primary of their partition would
wait for ever if that MM is frozen (SIGSTOP, a long GC pause, a half-open network): the client only
resends after an error. So when a new assignment table moves a partition's primary away from an MM,
the CM drops its link to that MM: every request pending on it fails at once (MM_UNAVAILABLE, which
the producer resends, now to the new primary at the new epoch; the sequence numbers drop what was
stored twice). The link reconnects by itself and replays the subscriptions.

Deliveries made by the old primary are void once a partition moves to a new epoch: the new primary
hands every unacknowledged batch out again, flagged, possibly to another consumer. A consumer may
still hold old deliveries it has not handed to its application yet (a slow one holds a whole
window); handed out after the flagged repeat, they would be unflagged repeats. So every consumer
session gets a REVOKE (partition, new epoch) as soon as this CM learns of the epoch, from the table
or from the first delivery at that epoch it relays (whichever comes first, so a REVOKE always
precedes the new primary's deliveries on a session); the client drops older ones.
"""

from __future__ import annotations

import logging
from typing import Any

from hybridmq.api.frames import FrameType
from hybridmq.broker.cm.mm_links import MMLink
from hybridmq.broker.cm.server import ConnectionManager
from hybridmq.protocol.connection import ConnectionClosed

log = logging.getLogger(__name__)


class FailoverConnectionManager(ConnectionManager):
    _primaries: dict[str, str | None]
    _epochs: dict[str, int]

    async def start(self) -> None:
        await super().start()  # starts the source: the first table is in
        self._primaries = {n: a.primary for n, a in self.source.partitions().items()}
        self._epochs = {n: a.epoch for n, a in self.source.partitions().items()}
        self.source.subscribe(self._on_table)

    def _on_table(self) -> None:
        table = self.source.partitions()
        demoted: set[str] = set()
        for name, a in table.items():
            old = self._primaries.get(name)
            if old is not None and old != a.primary:
                demoted.add(old)
            self._new_epoch(name, a.epoch)
        self._primaries = {n: a.primary for n, a in table.items()}
        for mm in sorted(demoted):
            link = self.links.get(mm)
            if link is not None and link.conn is not None and not link.conn.closed:
                log.info("%s is no longer primary of some partitions: resetting the link", mm)
                link.conn.close()

    def _on_mm_frame(self, link: MMLink, frame: dict[str, Any]) -> None:
        epoch = frame.get("e")
        if frame["t"] == FrameType.DELIVER and epoch is not None and hasattr(self, "_epochs"):
            self._new_epoch(str(frame.get("p", "")), int(epoch))
        super()._on_mm_frame(link, frame)

    def _new_epoch(self, partition: str, epoch: int) -> None:
        """Revoke the older epochs' deliveries of ``partition`` on every consumer session."""
        known = self._epochs.get(partition)
        self._epochs[partition] = max(epoch, known if known is not None else epoch)
        if known is None or epoch <= known:
            return
        revoke = {"t": FrameType.REVOKE, "p": partition, "e": epoch}
        for session in list(self.sessions.values()):
            if session.subs and not session.conn.closed:
                try:
                    session.conn.send_nowait(dict(revoke))
                except ConnectionClosed:
                    pass
