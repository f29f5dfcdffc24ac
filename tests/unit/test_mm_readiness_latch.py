"""An MM's readiness after a start: not before its first table; empty is Ready and stays Ready when
it is given copies; one restarted with a copy behind is not Ready until caught up, then stays."""

from __future__ import annotations

from hybridmq.api.assignment import PartitionAssignment, PartitionType
from hybridmq.broker.mm.readiness import CatchUp


def _table(replicas: tuple[str, ...], in_sync: tuple[str, ...]) -> dict[str, PartitionAssignment]:
    a = PartitionAssignment(
        name="p0", type=PartitionType.FIXED, epoch=1, primary=replicas[0], replicas=replicas, in_sync=in_sync
    )
    return {"p0": a}


def test_restarted_with_a_copy_behind() -> None:
    mm = CatchUp("mm-1")
    assert not mm.ready(_table(("mm-0", "mm-1"), ("mm-0",)))  # its backup is behind
    assert mm.ready(_table(("mm-0", "mm-1"), ("mm-0", "mm-1")))
    # Once caught up, a copy it receives later (a replacement, balancing) does not unready it.
    assert mm.ready(_table(("mm-0", "mm-1"), ("mm-0",)))


def test_empty_is_ready_and_copies_given_later_do_not_unready_it() -> None:
    """A roll moved this MM's replicas away and restarted it: Ready at once, and still Ready when
    the next MM's replacement copies land on it and catch up (the roll reads their in-sync sets)."""
    mm = CatchUp("mm-1")
    assert mm.ready({})
    assert mm.ready(_table(("mm-0", "mm-1"), ("mm-0",)))


def test_not_ready_before_the_first_table() -> None:
    mm = CatchUp("mm-1")
    assert not mm.ready({}, known=False)  # an empty start is not an empty table
    assert not mm.ready(_table(("mm-0", "mm-1"), ("mm-0",)))


def test_a_primary_is_caught_up_by_definition() -> None:
    assert CatchUp("mm-0").ready(_table(("mm-0", "mm-1"), ("mm-0",)))
