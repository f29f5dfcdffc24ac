"""Which of a plan's decisions go through the assignment map first, and which Partition statuses
still have to follow it (pure: the operator reads and writes, these functions decide).

A primary change (a higher epoch) is what brokers wait for after an MM loss, and so is a replica's
removal from an in-sync set (the primary acknowledges nothing until the lost backup is out), so
every such change of a round is committed in one write of the assignment map
(``hybridmq.api.assignment_map``) before the Partition statuses are written one by one. If the
operator stops between the two, the map is still ahead of those Partitions: its next round sees
them through the map (``overlay``) and writes the statuses that did not follow (``follow_ups``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from hybridmq.api.assignment_map import MapEntry, pending
from hybridmq.api.resources import PartitionStatus
from hybridmq.planner.changes import Plan, UpdatePartitionStatus

__all__ = ["Observed", "Seen", "follow_ups", "map_commit", "overlay", "superseded"]


class Seen(NamedTuple):
    """A Partition as the operator last saw it: what says whether a map entry is ahead of it."""

    uid: str
    epoch: int
    resource_version: str
    in_sync: frozenset[str] = frozenset()


# A Partition behind the map: how it was seen, and its status.
Observed = tuple[Seen, PartitionStatus | None]


def _entry(new: PartitionStatus, seen: Seen) -> MapEntry | None:
    """The map entry of a change brokers wait for: a new primary (a higher epoch), or a removal
    from the in-sync set at the same epoch (tied to the version it was planned on); None for any
    other change."""
    if not seen.uid:
        return None
    if new.epoch > seen.epoch:
        return MapEntry.of(seen.uid, new)
    if new.epoch == seen.epoch and seen.resource_version and not seen.in_sync <= set(new.in_sync):
        return MapEntry.of(seen.uid, new, seen.resource_version)
    return None


def superseded(plan: Plan, entries: Mapping[str, MapEntry]) -> frozenset[str]:
    """Partitions whose removal entry a planned status at its epoch outgrows (it names a replica the
    entry removed, say one that caught up again): the entry must leave the map before that status
    is written, or the operator would take the removal for one not carried out yet."""
    return frozenset(
        u.name
        for u in plan.updates()
        if (e := entries.get(u.name)) is not None
        and e.resource_version
        and u.status.epoch == e.status.epoch
        and not set(u.status.in_sync) <= set(e.status.in_sync)
    )


def map_commit(
    plan: Plan, seen: Mapping[str, Seen], entries: Mapping[str, MapEntry]
) -> dict[str, MapEntry] | None:
    """The map to write before ``plan``'s status writes, given how each Partition was seen: the
    entries still pending for their Partitions, but the ``superseded`` ones, plus the plan's
    changes that brokers wait for; None when there is nothing to add or drop (the status writes
    alone are the commit, as for every other change)."""
    changes = {
        u.name: entry
        for u in plan.updates()
        if (s := seen.get(u.name)) is not None and (entry := _entry(u.status, s)) is not None
    }
    dropped = superseded(plan, entries)
    if not changes and not dropped:
        return None
    kept = {
        name: entry
        for name, entry in entries.items()
        if name not in dropped
        and (s := seen.get(name)) is not None
        and pending(entry, s.uid, s.epoch, s.in_sync)
    }
    return {**kept, **changes}


def overlay(observed: Mapping[str, Observed], entries: Mapping[str, MapEntry]) -> dict[str, PartitionStatus]:
    """The statuses the map is ahead of: what those Partitions are, committed but not yet written."""
    out: dict[str, PartitionStatus] = {}
    for name, entry in entries.items():
        item = observed.get(name)
        if item is None:
            continue
        seen, status = item
        if pending(entry, seen.uid, seen.epoch, seen.in_sync):
            out[name] = entry.applied_to(status)
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
