"""Graceful handoff in the pure planner: a stopping MM's replicas move make-before-break."""

from __future__ import annotations

from hybridmq.api.assignment import PartitionAssignment
from hybridmq.local.controller import cluster_spec
from hybridmq.planner import ReplicaReport, plan_assignments
from hybridmq.planner.changes import MessageManagersEvacuated

MMS = ("mm-0", "mm-1", "mm-2")
SPEC = cluster_spec(fixed=3, replicas=2, on_demand_per_mm=0)


def _reports(table: tuple[PartitionAssignment, ...], caught_up: bool) -> dict[str, ReplicaReport]:
    """Each primary reports every replica in sync (``caught_up``) or only the committed set."""
    return {
        a.name: ReplicaReport(
            reporter=a.primary or "",
            epoch=a.epoch,
            in_sync=tuple(a.replicas if caught_up else a.in_sync),
            log_end_offsets=dict.fromkeys(a.replicas, 10),
            log_end_offset=10,
        )
        for a in table
        if a.primary is not None
    }


def test_a_stopping_mm_hands_its_primaries_over_then_leaves_every_replica_set() -> None:
    table = plan_assignments([], MMS, spec=SPEC).assignments
    victim = table[0].primary
    assert victim is not None
    led = {a.name: a for a in table if a.primary == victim}
    backed = {a.name for a in table if victim in a.replicas and a.primary != victim}

    first = plan_assignments(table, MMS, spec=SPEC, reports=_reports(table, False), stopping=[victim])
    after = {a.name: a for a in first.assignments}
    for name, a in led.items():
        # At once: an in-sync backup at the next epoch; the old primary stays an in-sync backup.
        assert after[name].primary in a.in_sync and after[name].primary != victim
        assert after[name].epoch == a.epoch + 1
        assert victim in after[name].in_sync
    for a in first.assignments:
        if victim in a.replicas:
            assert len(a.replicas) == 3  # a replacement was added beside it
    assert backed  # the case is exercised
    assert not any(isinstance(c, MessageManagersEvacuated) for c in first.plan.changes)
    assert {e.reason for c in first.plan.changes for e in getattr(c, "events", ())} >= {"HandedOff"}

    # Once the replacements are in sync, the stopping MM leaves every replica set.
    caught_up = plan_assignments(
        first.assignments, MMS, spec=SPEC, reports=_reports(first.assignments, True), stopping=[victim]
    )
    for a in caught_up.assignments:
        assert victim not in a.replicas, a
        assert len(a.replicas) == 2 and set(a.in_sync) == set(a.replicas), a


def test_a_stopping_mm_without_an_in_sync_backup_keeps_its_primary() -> None:
    table = plan_assignments([], MMS, spec=SPEC).assignments
    victim = table[0].primary
    assert victim is not None
    lagging = tuple(
        a.model_copy(update={"in_sync": (a.primary,)}) if a.primary == victim else a for a in table
    )
    result = plan_assignments(lagging, MMS, spec=SPEC, reports=_reports(lagging, False), stopping=[victim])
    for a in result.assignments:
        if a.name == table[0].name:
            # Nothing in sync to take over: it keeps serving (the MM waits, bounded by its timeout).
            assert a.primary == victim and a.epoch == table[0].epoch
