"""The planner's output: typed changes, each carrying the reason and message of its Kubernetes Event."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from hybridmq.api.resources import PARTITION_FINALIZER, PartitionSpec, PartitionStatus

__all__ = [
    "Change",
    "CreatePartition",
    "DeletePartition",
    "MessageManagersEvacuated",
    "Plan",
    "PlanEvent",
    "ReleaseFinalizer",
    "UpdatePartitionStatus",
]


@dataclass(frozen=True, slots=True)
class PlanEvent:
    """One step worth a Kubernetes Event: ``reason`` is one CamelCase word, ``message`` a sentence."""

    reason: str
    message: str
    warning: bool = False

    @property
    def type(self) -> str:
        return "Warning" if self.warning else "Normal"


@dataclass(frozen=True, slots=True)
class CreatePartition:
    """Create a Partition with ``spec`` and then write ``status`` (status is a subresource)."""

    name: str
    spec: PartitionSpec
    status: PartitionStatus
    labels: Mapping[str, str]
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class UpdatePartitionStatus:
    """Replace the status of Partition ``name``. One Event per entry of ``events`` (none when only
    reported figures changed)."""

    name: str
    status: PartitionStatus
    reason: str
    message: str
    events: tuple[PlanEvent, ...] = ()


@dataclass(frozen=True, slots=True)
class DeletePartition:
    """Delete a drained on-demand Partition (its finalizer keeps it until the data is gone)."""

    name: str
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class ReleaseFinalizer:
    """Remove ``finalizer`` from a Partition being deleted: no live MM holds its data any more."""

    name: str
    reason: str
    message: str
    finalizer: str = PARTITION_FINALIZER


@dataclass(frozen=True, slots=True)
class MessageManagersEvacuated:
    """These leaving MMs hold no replica any more: the scale-down may remove them."""

    names: tuple[str, ...]
    reason: str
    message: str


Change = (
    CreatePartition | UpdatePartitionStatus | DeletePartition | ReleaseFinalizer | MessageManagersEvacuated
)


@dataclass(frozen=True, slots=True)
class Plan:
    """The result of one planning round. ``changes`` are applied in order."""

    changes: tuple[Change, ...] = ()
    # Leaving MMs that hold no replica: safe to remove now.
    safe_to_remove: frozenset[str] = frozenset()
    # Leaving MMs that still hold replicas being moved away.
    evacuating: frozenset[str] = frozenset()
    # Partitions that have no primary (no in-sync replica alive): offline until one returns.
    offline: tuple[str, ...] = field(default=())

    def creates(self) -> list[CreatePartition]:
        return [c for c in self.changes if isinstance(c, CreatePartition)]

    def updates(self) -> list[UpdatePartitionStatus]:
        return [c for c in self.changes if isinstance(c, UpdatePartitionStatus)]

    def deletes(self) -> list[DeletePartition]:
        return [c for c in self.changes if isinstance(c, DeletePartition)]

    def releases(self) -> list[ReleaseFinalizer]:
        return [c for c in self.changes if isinstance(c, ReleaseFinalizer)]

    def events(self) -> list[tuple[str, PlanEvent]]:
        """(object name, event) for every Event the changes call for."""
        out: list[tuple[str, PlanEvent]] = []
        for change in self.changes:
            if isinstance(change, UpdatePartitionStatus):
                out.extend((change.name, e) for e in change.events)
            elif isinstance(change, MessageManagersEvacuated):
                out.extend((n, PlanEvent(change.reason, change.message)) for n in change.names)
            else:
                out.append((change.name, PlanEvent(change.reason, change.message)))
        return out
