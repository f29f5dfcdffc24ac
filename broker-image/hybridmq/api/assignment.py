"""What a broker needs to know about partitions and peers: the operator's decisions, flattened.

The operator (or, in broker-only mode, the local controller) is the only writer. Brokers read these
through an ``AssignmentSource``; in a cluster they are derived from ``Partition.status`` and the
``BrokerCluster`` broker table.
"""

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field


class PartitionType(StrEnum):
    FIXED = "fixed"
    ON_DEMAND = "on-demand"


class PartitionState(StrEnum):
    PENDING = "Pending"
    ACTIVE = "Active"
    MIGRATING = "Migrating"
    DRAINING = "Draining"
    DRAINED = "Drained"


class BrokerRole(StrEnum):
    CM = "cm"
    MM = "mm"


class PartitionAssignment(BaseModel):
    """One partition's placement at one epoch. ``replicas`` is in rank order, primary first."""

    model_config = ConfigDict(frozen=True)

    name: str
    type: PartitionType
    state: PartitionState = PartitionState.ACTIVE
    epoch: int = Field(default=0, ge=0)
    primary: str | None = None
    replicas: tuple[str, ...] = ()
    in_sync: tuple[str, ...] = ()
    # An on-demand partition taken over after a failover only drains unless this is set.
    accept_writes: bool = True
    min_in_sync: int = Field(default=2, ge=1)
    # When a draining on-demand partition was first seen empty (its retention runs from here).
    drained_since: datetime | None = None

    @property
    def backups(self) -> tuple[str, ...]:
        return tuple(r for r in self.replicas if r != self.primary)

    @property
    def writable(self) -> bool:
        # A Draining on-demand partition keeps taking writes only with acceptWritesAfterFailover;
        # a Migrating fixed partition (failed over, waiting for a replacement replica) serves on.
        live = self.state in (PartitionState.ACTIVE, PartitionState.MIGRATING, PartitionState.DRAINING)
        return live and self.accept_writes and self.primary is not None


class BrokerEntry(BaseModel):
    """One row of the broker table: the directory clients and brokers use to find each other."""

    model_config = ConfigDict(frozen=True)

    name: str
    role: BrokerRole
    address: str  # host:port of the binary protocol
    http_address: str | None = None  # host:port of /healthz, /metrics, /admin
    ready: bool = True
