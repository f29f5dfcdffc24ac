"""Balancing primaries in the pure planner: a returning (empty) MM gets primaries back, one
confirmed step at a time, until the MMs lead within one of each other."""

from __future__ import annotations

from collections import Counter

from hybridmq.api.assignment import PartitionAssignment, PartitionType
from hybridmq.local.controller import cluster_spec
from hybridmq.planner import ReplicaReport, plan_assignments

MMS = ("mm-0", "mm-1", "mm-2")
SPEC = cluster_spec(fixed=6, replicas=2, on_demand_per_mm=0)


def caught_up(table: tuple[PartitionAssignment, ...]) -> dict[str, ReplicaReport]:
    """Every primary reports at its epoch with every replica in sync (the brokers followed)."""
    return {
        a.name: ReplicaReport(reporter=a.primary, epoch=a.epoch, in_sync=tuple(a.replicas))
        for a in table
        if a.primary is not None
    }


def primaries(table: tuple[PartitionAssignment, ...]) -> Counter[str]:
    return Counter({mm: 0 for mm in MMS} | Counter(a.primary for a in table if a.primary))


def test_a_returning_mm_gets_primaries_back_until_balanced() -> None:
    table = plan_assignments([], MMS, spec=SPEC).assignments
    # mm-0 is lost: its partitions fail over and get replacement copies on the others.
    for _ in range(3):
        table = plan_assignments(table, ("mm-1", "mm-2"), spec=SPEC, reports=caught_up(table)).assignments
    assert all("mm-0" not in a.replicas for a in table)
    assert primaries(table)["mm-0"] == 0
    epochs = {a.name: a.epoch for a in table}

    steps = 0
    while max(primaries(table).values()) - min(primaries(table).values()) > 1:
        before = table
        # Without the brokers' confirmation (no reports), nothing moves: one step at a time.
        assert plan_assignments(table, MMS, spec=SPEC).assignments == table
        table = plan_assignments(table, MMS, spec=SPEC, reports=caught_up(table)).assignments
        assert table != before, "no progress"
        for a in table:
            assert len(a.replicas) in (2, 3) and a.primary in a.in_sync
            moved = next(b for b in before if b.name == a.name).primary != a.primary
            assert not moved or a.epoch == next(b for b in before if b.name == a.name).epoch + 1
        steps += 1
        assert steps < 30
    assert max(primaries(table).values()) - min(primaries(table).values()) <= 1
    assert all(len(a.replicas) == 2 for a in table)
    assert any(a.epoch > epochs[a.name] for a in table)


def fixed(index: int, *replicas: str) -> PartitionAssignment:
    return PartitionAssignment(
        name=f"local-fixed-{index}",
        type=PartitionType.FIXED,
        epoch=1,
        primary=replicas[0],
        replicas=replicas,
        in_sync=replicas,
    )


# mm-1 leads two fixed partitions, mm-0 none but holds two backups, neither of a partition mm-1
# leads: balancing must add a copy on mm-0 and hand it a primary.
SKEWED_MMS = ("mm-0", "mm-1", "mm-2", "mm-3")
SKEWED_SPEC = cluster_spec(fixed=4, replicas=2, on_demand_per_mm=0)
SKEWED: tuple[PartitionAssignment, ...] = (
    fixed(0, "mm-1", "mm-2"),
    fixed(1, "mm-1", "mm-3"),
    fixed(2, "mm-2", "mm-0"),
    fixed(3, "mm-3", "mm-0"),
)


def test_the_copy_added_to_receive_a_primary_is_not_trimmed_before_it_gets_it() -> None:
    """The MM leading the fewest fixed partitions may hold the most replicas (backups of others):
    the copy a balancing move put there must receive the primary, not be trimmed as surplus."""
    mms, spec = SKEWED_MMS, SKEWED_SPEC
    table = SKEWED
    history: list[tuple[str, ...]] = []
    for _ in range(10):
        result = plan_assignments(table, mms, spec=spec, reports=caught_up(table))
        history.append(tuple(e.reason for c in result.plan.changes for e in getattr(c, "events", ())))
        table = result.assignments
    led = Counter({mm: 0 for mm in mms} | Counter(a.primary for a in table if a.primary))
    assert max(led.values()) - min(led.values()) <= 1, f"never balanced: {led}; events {history[-3:]}"
    assert all(len(a.replicas) == 2 for a in table)
    assert history[-1] == (), f"still planning changes: {history[-3:]}"


def test_the_copy_awaiting_a_primary_survives_a_round_that_cannot_balance() -> None:
    """A round that may not balance (a primary has not reported yet) trims nothing from a partition
    whose in-sync extra copy waits for its primary; the next settled round completes the move."""
    mms, spec = SKEWED_MMS, SKEWED_SPEC
    table = SKEWED
    table = plan_assignments(table, mms, spec=spec, reports=caught_up(table)).assignments
    assert table[0].replicas == ("mm-1", "mm-2", "mm-0")
    unsettled = caught_up(table)
    del unsettled["local-fixed-3"]
    table = plan_assignments(table, mms, spec=spec, reports=unsettled).assignments
    assert table[0].replicas == ("mm-1", "mm-2", "mm-0") and table[0].in_sync == table[0].replicas
    table = plan_assignments(table, mms, spec=spec, reports=caught_up(table)).assignments
    assert table[0].primary == "mm-0" and len(table[0].replicas) == 2
