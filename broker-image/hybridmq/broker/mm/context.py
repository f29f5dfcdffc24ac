"""What the MM's request handlers and its replica manager use of the MM (``MMContext``), so that none
of them imports the server. The ``MessageManager`` is one; a unit test passes a small fake."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from hybridmq.broker.assignment_source import AssignmentSource
from hybridmq.broker.destinations.delivery import ConsumerLink
from hybridmq.broker.mm.config import MMConfig
from hybridmq.broker.mm.liveness import Liveness
from hybridmq.broker.mm.promotion_waits import PromotionWaits

if TYPE_CHECKING:
    from hybridmq.broker.mm.partition import PartitionHost
    from hybridmq.broker.mm.replica_manager import ReplicaManager


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
    def hosts(self) -> dict[str, PartitionHost]: ...  # the partitions this MM is primary of

    @property
    def links(self) -> dict[tuple[int, str], ConsumerLink]: ...  # (CM connection id, key) -> link

    @property
    def promotion_waits(self) -> PromotionWaits: ...  # produces held while a promotion finishes

    @property
    def replica_manager(self) -> ReplicaManager: ...

    def wake(self) -> None: ...  # something to deliver: run the delivery loop

    def settled(self) -> bool: ...  # nothing this MM still has to hand over (a stopping MM)
