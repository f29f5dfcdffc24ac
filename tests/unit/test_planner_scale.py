"""Scale: 1,000 fixed partitions whose primary MM is lost are all reassigned in one plan.

Timing-free on purpose (CI machines vary); bench/operator_failover.py measures the wall clock.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hybridmq.api.assignment import PartitionState, PartitionType
from hybridmq.api.resources import BrokerClusterSpec
from hybridmq.planner import ClusterState, MessageManager, apply_changes, plan

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


def test_thousand_fixed_partitions_fail_over_in_one_plan() -> None:
    spec = BrokerClusterSpec.model_validate({"partitions": {"fixed": {"count": 1000, "replicas": 3}}})
    members = tuple(MessageManager(f"mm-{i}") for i in range(6))
    state = ClusterState("big", spec, members, (), NOW)
    first = plan(state)
    assert len(first.creates()) == 1000 + 6
    state = apply_changes(state, first.changes)
    primaries = Counter(p.status.primary for p in state.partitions if p.status)
    assert max(primaries.values()) - min(primaries.values()) <= 1  # spread evenly

    lost = tuple(
        replace(m, alive=False, lost_reason="pod deleted", lost_since=NOW) if m.name == "mm-0" else m
        for m in members
    )
    before = {p.name: p.status for p in state.partitions}
    on_lost = {n for n, s in before.items() if s and "mm-0" in s.replicas}
    led = {n for n, s in before.items() if s and s.primary == "mm-0"}
    assert len(led) >= 160

    result = plan(replace(state, message_managers=lost, now=NOW + timedelta(seconds=1)))
    updated = {u.name: u.status for u in result.updates()}
    assert set(updated) == on_lost  # exactly the partitions that had a replica there
    for name in led:
        new, old = updated[name], before[name]
        assert old is not None
        assert new.primary is not None and new.primary != "mm-0" and new.primary in old.in_sync
        assert new.epoch == old.epoch + 1
    for name, new in updated.items():
        assert "mm-0" not in new.replicas and len(set(new.replicas)) == len(new.replicas)
        if "fixed" in name:
            assert new.state == PartitionState.ACTIVE and len(new.replicas) == 3
        else:  # an on-demand partition only drains after losing its primary, or replaces a backup
            assert new.state == PartitionState.DRAINING or len(new.replicas) == 2
    # The new load is spread over the survivors, not piled on one.
    after = apply_changes(state, result.changes)
    fixed_primaries = Counter(
        p.status.primary for p in after.partitions if p.status and p.spec.type == PartitionType.FIXED
    )
    assert set(fixed_primaries) == {"mm-1", "mm-2", "mm-3", "mm-4", "mm-5"}
    assert max(fixed_primaries.values()) - min(fixed_primaries.values()) <= 40
