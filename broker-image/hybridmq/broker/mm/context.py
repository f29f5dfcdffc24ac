"""What the MM's request handlers use of the MM (``MMContext``), so that none of them imports the
server. The ``MessageManager`` is one; a unit test passes a small fake. (The replica manager sits
below the handlers: it gets its collaborators one by one.)"""

from __future__ import annotations

from typing import Protocol

from hybridmq.broker.assignment_source import AssignmentSource
from hybridmq.broker.mm.config import MMConfig
from hybridmq.broker.mm.hosted import HostedPartitions, Subscriptions
from hybridmq.broker.mm.liveness import Liveness
from hybridmq.broker.mm.replica_manager import ReplicaManager
from hybridmq.broker.routing.held_requests import HeldRequests
from hybridmq.protocol import Connection


class MMContext(Protocol):
    @property
    def config(self) -> MMConfig: ...

    @property
    def name(self) -> str: ...

    @property
    def source(self) -> AssignmentSource: ...  # the assignment table

    @property
    def liveness(self) -> Liveness: ...  # the lease: whether this MM may act as a primary

    @property
    def hosted(self) -> HostedPartitions: ...  # the partitions this MM is primary of

    @property
    def subscriptions(self) -> Subscriptions: ...  # the CMs' consumer links

    @property
    def promotion_waits(self) -> HeldRequests[Connection]: ...  # produces held while a promotion finishes

    @property
    def replica_manager(self) -> ReplicaManager: ...

    def wake(self) -> None: ...  # something to deliver: run the delivery loop

    def settled(self) -> bool: ...  # nothing this MM still has to hand over (a stopping MM)
