"""The planner's input: one BrokerCluster, its Message Managers and its Partitions, at one instant.

Everything here is plain data; the Kopf handlers (or ``hybridmq local``) build it from what they
observe (pods, Leases, MM reports, Partition resources) and hand it to ``plan()``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from hybridmq.api.resources import (
    PARTITION_FINALIZER,
    BrokerClusterSpec,
    Partition,
    PartitionSpec,
    PartitionStatus,
)

__all__ = ["ClusterState", "MessageManager", "PartitionInfo", "ReplicaReport", "natural_key"]

_DIGITS = re.compile(r"(\d+)")


@functools.lru_cache(maxsize=1 << 16)
def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that puts ``mm-2`` before ``mm-10`` (cached: the planner and the status sort
    thousands of partition names every round)."""
    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in _DIGITS.split(name) if part)


@dataclass(frozen=True, slots=True)
class MessageManager:
    """One MM pod as the operator sees it.

    ``alive``: the pod exists, has not failed and its Lease is fresh; an MM that is not alive is
    *lost* and its replicas fail over. ``ready``: its readiness probe passes; only alive, ready MMs
    that are not ``leaving`` receive new replicas. ``leaving``: the MM will be removed by a
    scale-down, so its replicas are moved away first. ``stopping``: the MM was asked to stop (SIGTERM:
    a roll, a drain) and asks for its replicas to move before it exits (graceful handoff): its
    primaries go to in-sync replicas at once, its backups once a replacement is in sync.
    ``accounted``: the operator knows the MM process behind the pod (it saw the pod's own Lease and
    recorded its incarnation); until then the MM gets no new replicas, or its first Lease would look
    like a restart of what it was given. ``domain``: its failure domain (the value of the cluster's
    topology key label on the MM's node); None when unknown (not scheduled yet, or the node lacks
    the label).
    """

    name: str
    alive: bool = True
    ready: bool = True
    leaving: bool = False
    stopping: bool = False
    lost_reason: str | None = None  # "pod deleted", "lease expired", ...
    lost_since: datetime | None = None  # when the loss was first observed (for failover duration)
    # The MM's own report: log end offset of each partition it holds.
    log_end_offsets: Mapping[str, int] = field(default_factory=dict)
    # The partitions whose data the MM still holds on disk; None when it has not reported.
    stored: frozenset[str] | None = None
    accounted: bool = True
    domain: str | None = None

    @property
    def eligible(self) -> bool:
        """May receive new replicas."""
        return self.alive and self.ready and not self.leaving and not self.stopping and self.accounted


@dataclass(frozen=True, slots=True)
class ReplicaReport:
    """What a partition's primary reported about it (its ISR view and its figures)."""

    reporter: str
    epoch: int
    in_sync: tuple[str, ...]
    log_end_offsets: Mapping[str, int] = field(default_factory=dict)
    log_end_offset: int = 0
    committed_offset: int = 0
    backlog: int = 0
    producers: int = 0
    reader_lag: int = 0


def decision_shape(r: ReplicaReport | None) -> tuple[Any, ...] | None:
    """What of a primary's report can change a decision: who reports, its epoch, its in-sync set,
    and whether the partition is empty, unattended and read to its end (on-demand GC). Moving
    offsets and figures alone change no decision: a planner's caller may leave them to its next
    periodic plan instead of planning every partition again for each produce."""
    if r is None:
        return None
    return (r.reporter, r.epoch, r.in_sync, r.backlog == 0, r.producers == 0, r.reader_lag == 0)


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One Partition resource: spec, current status and whether it is being deleted."""

    name: str
    spec: PartitionSpec
    status: PartitionStatus | None = None
    deleting: bool = False
    finalizers: tuple[str, ...] = (PARTITION_FINALIZER,)
    generation: int | None = None
    report: ReplicaReport | None = None

    @classmethod
    def from_resource(cls, partition: Partition, report: ReplicaReport | None = None) -> PartitionInfo:
        meta = partition.metadata
        if not meta.name:
            raise ValueError("a Partition without metadata.name")
        return cls(
            name=meta.name,
            spec=partition.spec,
            status=partition.status,
            deleting=meta.deletion_timestamp is not None,
            finalizers=tuple(meta.finalizers),
            generation=meta.generation,
            report=report,
        )


@dataclass(frozen=True, slots=True)
class ClusterState:
    """Everything one planning round looks at. ``now`` keeps the planner pure."""

    cluster: str
    spec: BrokerClusterSpec
    message_managers: tuple[MessageManager, ...]
    partitions: tuple[PartitionInfo, ...]
    now: datetime

    def partition(self, name: str) -> PartitionInfo | None:
        for info in self.partitions:
            if info.name == name:
                return info
        return None
