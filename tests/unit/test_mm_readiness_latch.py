"""An MM's readiness after a start: not before its first table; empty is Ready, a copy behind is
not, caught up stays Ready."""

from __future__ import annotations

from hybridmq.api.assignment import PartitionAssignment, PartitionType
from hybridmq.broker.mm.readiness import CatchUp


def _table(replicas: tuple[str, ...], in_sync: tuple[str, ...]) -> dict[str, PartitionAssignment]:
    a = PartitionAssignment(
        name="p0", type=PartitionType.FIXED, epoch=1, primary=replicas[0], replicas=replicas, in_sync=in_sync
    )
    return {"p0": a}


def test_empty_is_ready_then_a_copy_behind_is_not_then_caught_up_stays_ready() -> None:
    mm = CatchUp("mm-1")
    assert mm.ready({})  # a new MM holding nothing
    assert mm.ready(_table(("mm-0", "mm-2"), ("mm-0", "mm-2")))  # not named
    assert not mm.ready(_table(("mm-0", "mm-1"), ("mm-0",)))  # its backup is behind
    assert mm.ready(_table(("mm-0", "mm-1"), ("mm-0", "mm-1")))
    # Once caught up, a copy it receives later (a replacement, balancing) does not unready it.
    assert mm.ready(_table(("mm-0", "mm-1"), ("mm-0",)))


def test_not_ready_before_the_first_table() -> None:
    mm = CatchUp("mm-1")
    assert not mm.ready({}, known=False)  # an empty start is not an empty table
    assert not mm.ready(_table(("mm-0", "mm-1"), ("mm-0",)))


def test_a_primary_is_caught_up_by_definition() -> None:
    assert CatchUp("mm-0").ready(_table(("mm-0", "mm-1"), ("mm-0",)))
