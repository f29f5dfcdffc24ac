"""Where a CM sends what concerns a partition: its primary's link and the partition epoch.

Every request about a partition (a produce, an acknowledgement, a fetch, a transaction step, a
takeover marker) goes to the primary the assignment table names, stamped with the table's epoch,
and only over a link that is up: a link whose connection is closed or not yet open takes nothing
(``MM_UNAVAILABLE``: the CM holds a produce until a primary is reachable, ``held_requests.py``,
and tells other clients at once). One answer here replaces the copies of that test each request
path used to carry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from hybridmq.api.assignment import PartitionAssignment
from hybridmq.api.frames import ErrorCode
from hybridmq.broker.assignment_source import AssignmentSource
from hybridmq.protocol import Connection


class Link(Protocol):
    """What routing needs of a CM's link to an MM: its connection, None until the first one."""

    @property
    def conn(self) -> Connection | None: ...


L = TypeVar("L", bound=Link, covariant=True)


class Unroutable(Exception):
    """Nothing to send the request to; ``code`` and ``msg`` are the client's error."""

    def __init__(self, code: ErrorCode, msg: str) -> None:
        super().__init__(msg)
        self.code = code
        self.msg = msg


@dataclass(frozen=True, slots=True)
class Route(Generic[L]):
    """A link that was up when the route was taken, and the epoch to stamp the request with."""

    link: L
    conn: Connection
    epoch: int
    assignment: PartitionAssignment | None  # None: an MM's internal log partition (epoch 0)


class Routes(Generic[L]):
    def __init__(self, source: AssignmentSource, links: Mapping[str, L]) -> None:
        self.source = source
        self.links = links  # the CM's, kept current by it; read here, never changed

    def link(self, mm: str | None) -> L | None:
        """The link to ``mm`` if its connection is open, else None."""
        link = self.links.get(mm or "")
        if link is None or link.conn is None or link.conn.closed:
            return None
        return link

    def up(self, mm: str | None) -> bool:
        return self.link(mm) is not None

    def live(self) -> list[str]:
        """The MMs whose links are up, by name."""
        return sorted(name for name in self.links if self.up(name))

    def open_conns(self) -> list[Connection]:
        """The connection of every link that is up: what a request to every MM goes over."""
        return [link.conn for link in self.links.values() if link.conn is not None and not link.conn.closed]

    def to(
        self, mm: str | None, epoch: int, assignment: PartitionAssignment | None = None
    ) -> Route[L] | None:
        """The route to ``mm`` (a partition's primary at ``epoch``) if its link is up."""
        link = self.link(mm)
        if link is None or link.conn is None:
            return None
        return Route(link, link.conn, epoch, assignment)

    def primary(self, partition: str, internal_owner: str | None = None) -> Route[L]:
        """The route to ``partition``'s primary with the table's epoch. ``internal_owner`` names
        the MM that holds it when it is an MM's internal log (not in the table, epoch 0).

        Raises ``Unroutable``: ``UNKNOWN_PARTITION`` when the table does not have it,
        ``MM_UNAVAILABLE`` when its primary's link is down."""
        a = self.source.partitions().get(partition)
        if a is None and internal_owner is None:
            raise Unroutable(ErrorCode.UNKNOWN_PARTITION, f"no partition {partition!r}")
        primary, epoch = (a.primary, a.epoch) if a is not None else (internal_owner, 0)
        route = self.to(primary, epoch, a)
        if route is None:
            raise Unroutable(ErrorCode.MM_UNAVAILABLE, f"primary of {partition} unavailable")
        return route
