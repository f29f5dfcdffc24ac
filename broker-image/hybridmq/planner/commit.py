"""Which of a plan's decisions go through the assignment map first, and which Partition statuses
still have to follow it (pure: the operator reads and writes, these functions decide).

A primary change (a higher epoch) is what brokers wait for after an MM loss, so every such change
of a round is committed in one write of the assignment map (``hybridmq.api.assignment_map``)
before the Partition statuses are written one by one. If the operator stops between the two, the
map is still ahead of those Partitions: its next round sees them through the map (``overlay``)
and writes the statuses that did not follow (``follow_ups``).
"""

from __future__ import annotations

from collections.abc import Mapping

from hybridmq.api.assignment_map import MapEntry, ahead
from hybridmq.api.resources import PartitionStatus
from hybridmq.planner.changes import Plan, UpdatePartitionStatus

__all__ = ["Observed", "follow_ups", "map_commit", "overlay"]

# A Partition as the operator last saw it: (uid, status).
Observed = tuple[str, PartitionStatus | None]


def _epoch(status: PartitionStatus | None) -> int:
    return status.epoch if status is not None else 0


def map_commit(
    plan: Plan, epochs: Mapping[str, tuple[str, int]], entries: Mapping[str, MapEntry]
) -> dict[str, MapEntry] | None:
    """The map to write before ``plan``'s status writes, given each Partition's (uid, status
    epoch): the entries still ahead of their Partitions plus the plan's primary changes; None when
    the plan raises no epoch (nothing to commit early: the status writes alone are the commit, as
    for every other change)."""
    changes = {
        u.name: MapEntry.of(epochs[u.name][0], u.status)
        for u in plan.updates()
        if u.name in epochs and epochs[u.name][0] and u.status.epoch > epochs[u.name][1]
    }
    if not changes:
        return None
    kept = {
        name: entry
        for name, entry in entries.items()
        if name in epochs and ahead(entry, epochs[name][0], epochs[name][1])
    }
    return {**kept, **changes}


def overlay(observed: Mapping[str, Observed], entries: Mapping[str, MapEntry]) -> dict[str, PartitionStatus]:
    """The statuses the map is ahead of: what those Partitions are, committed but not yet written."""
    out: dict[str, PartitionStatus] = {}
    for name, entry in entries.items():
        seen = observed.get(name)
        if seen is not None and ahead(entry, seen[0], _epoch(seen[1])):
            out[name] = entry.applied_to(seen[1])
    return out


def follow_ups(behind: Mapping[str, PartitionStatus], plan: Plan) -> Plan:
    """``plan`` plus a status write for every Partition still behind the map that the plan does
    not write anyway (its own write carries the committed assignment already)."""
    planned = {u.name for u in plan.updates()}
    extra = tuple(
        UpdatePartitionStatus(
            name=name,
            status=status,
            reason="AssignmentCommitted",
            message=f"status follows the assignment map at epoch {status.epoch}",
        )
        for name, status in sorted(behind.items())
        if name not in planned
    )
    if not extra:
        return plan
    return Plan(
        changes=plan.changes + extra,
        safe_to_remove=plan.safe_to_remove,
        evacuating=plan.evacuating,
        offline=plan.offline,
    )
