"""Reported figures reach the Partition statuses at a bounded rate; every other change at once."""

from __future__ import annotations

from hybridmq.api.resources import PartitionStatus
from hybridmq.planner import Plan, UpdatePartitionStatus
from hybridmq.planner.figures import throttle_figures


def st(epoch: int = 1, leo: int = 0, in_sync: tuple[str, ...] = ("a", "b")) -> PartitionStatus:
    return PartitionStatus.model_validate(
        {
            "state": "Active",
            "epoch": epoch,
            "primary": "a",
            "replicas": ["a", "b"],
            "inSync": list(in_sync),
            "logEndOffset": leo,
        }
    )


def up(name: str, status: PartitionStatus) -> UpdatePartitionStatus:
    return UpdatePartitionStatus(name=name, status=status, reason="StatusObserved", message="")


def names(plan: Plan) -> list[str]:
    return [c.name for c in plan.updates()]


def test_figures_wait_for_their_interval_and_a_round_budget_stalest_first() -> None:
    before = {f"p{i}": st() for i in range(30)}
    moved = Plan(changes=tuple(up(f"p{i}", st(leo=100)) for i in range(30)))
    # Never written: due, but at most max_per_round of them; those written longest ago first.
    last = {f"p{i}": 100.0 - i for i in range(30)}  # p29 was written longest ago
    out = throttle_figures(moved, before, last, now=200.0, min_interval_s=5.0, max_per_round=4)
    assert names(out) == ["p26", "p27", "p28", "p29"]
    # Written 1 s ago: not due.
    recent = dict.fromkeys(before, 199.0)
    assert names(throttle_figures(moved, before, recent, now=200.0, min_interval_s=5.0)) == []


def test_anything_but_figures_is_written_at_once() -> None:
    before = {"p0": st(), "p1": st(), "p2": None}
    plan = Plan(
        changes=(
            up("p0", st(epoch=2, leo=5)),  # a new epoch (with figures)
            up("p1", st(in_sync=("a",), leo=5)),  # an in-sync change
            up("p2", st()),  # a first status
        )
    )
    out = throttle_figures(plan, before, dict.fromkeys(before, 199.0), now=200.0, min_interval_s=5.0)
    assert names(out) == ["p0", "p1", "p2"]
