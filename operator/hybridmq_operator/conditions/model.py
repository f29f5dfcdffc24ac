"""What the condition evaluators read (an observation) and what they return (a condition)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from hybridmq.planner import DomainSpread


@dataclass(frozen=True)
class Condition:
    type: str
    status: bool
    reason: str
    message: str = ""

    def as_dict(self, now: str, generation: int, previous: dict[str, Any] | None = None) -> dict[str, Any]:
        status = "True" if self.status else "False"
        since = now
        if previous and previous.get("status") == status and previous.get("lastTransitionTime"):
            since = str(previous["lastTransitionTime"])
        return {
            "type": self.type,
            "status": status,
            "reason": self.reason,
            "message": self.message,
            "lastTransitionTime": since,
            "observedGeneration": generation,
        }


@dataclass(frozen=True)
class PartitionObservation:
    name: str
    type: str  # "fixed" | "on-demand"
    state: str = "Pending"
    primary: str | None = None
    replicas: tuple[str, ...] = ()
    in_sync: tuple[str, ...] = ()
    desired_replicas: int = 2
    accept_writes: bool = True
    min_in_sync: int = 1  # in-sync copies a write needs (the partition's minInSync)


@dataclass(frozen=True)
class ClusterObservation:
    cm_desired: int
    cm_ready: int
    mm_desired: int
    mm_ready: int
    partitions: Sequence[PartitionObservation] = ()
    lost_mms: frozenset[str] = field(default_factory=frozenset)
    live_mms: frozenset[str] = field(default_factory=frozenset)
    # Broker pods that cannot start: (pod, waiting reason, message), e.g. ErrImagePull.
    pod_problems: tuple[tuple[str, str, str], ...] = ()
    # Why the child objects (StatefulSets, Services, ...) could not be applied, if they could not.
    children_error: str | None = None
    # A refused MM scale-down (its message), if one is pending.
    scale_down_blocked: str | None = None
    # MMs whose Lease report no longer fits the API's annotation limit (report bytes).
    oversize_reports: tuple[tuple[str, int], ...] = ()
    # Whether every fixed partition's replicas are in different failure domains (None: not known).
    domain_spread: DomainSpread | None = None
    # The roll of the broker pods (the ``Rolling`` condition), None until it is known.
    rolling: Condition | None = None


def merge_conditions(
    previous: Iterable[dict[str, Any]] | None,
    conditions: Iterable[Condition],
    now: str,
    generation: int,
) -> list[dict[str, Any]]:
    """New condition dicts, keeping ``lastTransitionTime`` of those whose status did not change."""
    by_type = {str(c.get("type")): c for c in (previous or ())}
    return [c.as_dict(now, generation, by_type.get(c.type)) for c in conditions]
