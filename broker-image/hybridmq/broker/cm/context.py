"""What the CM's request handlers use of the CM (``CMContext``), so that none of them imports the
server: read-by-offset routing (``fetch_route``), the transaction manager and its resolver. The
``ConnectionManager`` is one; a unit test passes a small fake."""

from __future__ import annotations

from typing import Protocol

from hybridmq.broker.assignment_source import AssignmentSource
from hybridmq.broker.auth import AclTable
from hybridmq.broker.cm.mm_links import MMLink
from hybridmq.broker.cm.session import SubEntry
from hybridmq.broker.routing import Routes


class CMContext(Protocol):
    @property
    def source(self) -> AssignmentSource: ...  # the assignment table

    @property
    def acl(self) -> AclTable: ...  # who may produce and consume what

    @property
    def routes(self) -> Routes[MMLink]: ...  # a partition's primary link and epoch

    @property
    def links(self) -> dict[str, MMLink]: ...  # every MM's link, by MM name

    @property
    def subs(self) -> dict[str, SubEntry]: ...  # this CM's subscriptions, by key
