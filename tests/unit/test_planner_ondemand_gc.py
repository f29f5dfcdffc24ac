"""On-demand garbage collection never deletes data someone may still need.

A draining on-demand partition is deleted only after its current primary reported it empty - no
producer attached (they moved and confirmed what it stores), backlog zero, no named reader cursor
behind the end - and it stayed so for ``retentionAfterDrainSeconds``. The property test checks
that with its own bookkeeping of the reports it fed in, over random histories.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hybridmq.api.assignment import PartitionState, PartitionType
from hybridmq.api.resources import BrokerClusterSpec
from hybridmq.planner import (
    ClusterState,
    DeletePartition,
    MessageManager,
    ReplicaReport,
    apply_changes,
    plan,
    plan_assignments,
)

NOW = datetime(2026, 11, 26, 6, 0, tzinfo=UTC)


def cluster_spec(retention: int) -> BrokerClusterSpec:
    return BrokerClusterSpec.model_validate(
        {
            "partitions": {
                "fixed": {"count": 0, "replicas": 2, "minInSync": 2},
                "onDemand": {"perMessageManager": 1, "replicas": 2, "retentionAfterDrainSeconds": retention},
            }
        }
    )


def draining_cluster(retention: int) -> tuple[ClusterState, str]:
    """Three MMs, mm-0 lost: its on-demand partition is Draining on a survivor."""
    members = tuple(MessageManager(f"mm-{i}") for i in range(3))
    state = ClusterState("gc", cluster_spec(retention), members, (), NOW)
    state = apply_changes(state, plan(state).changes)
    victim = next(p.name for p in state.partitions if p.status and p.status.primary == "mm-0")
    lost = tuple(
        replace(m, alive=False, lost_reason="pod deleted", lost_since=NOW) if m.name == "mm-0" else m
        for m in members
    )
    state = replace(state, message_managers=lost, now=NOW + timedelta(seconds=1))
    state = apply_changes(state, plan(state).changes)
    status = next(p.status for p in state.partitions if p.name == victim)
    assert status is not None and status.state == PartitionState.DRAINING
    return state, victim


def report(state: ClusterState, name: str, **figures: int) -> ClusterState:
    """The draining partition's current primary reports these figures (the rest zero)."""
    parts = []
    for p in state.partitions:
        if p.name == name and p.status is not None and p.status.primary is not None:
            p = replace(
                p,
                report=ReplicaReport(
                    reporter=p.status.primary,
                    epoch=p.status.epoch,
                    in_sync=tuple(p.status.replicas),
                    log_end_offset=50,
                    **figures,
                ),
            )
        parts.append(p)
    return replace(state, partitions=tuple(parts))


def at(state: ClusterState, seconds: float) -> ClusterState:
    return replace(state, now=NOW + timedelta(seconds=seconds))


def deleted(state: ClusterState) -> tuple[list[str], ClusterState]:
    result = plan(state)
    return [c.name for c in result.changes if isinstance(c, DeletePartition)], apply_changes(
        state, result.changes
    )


def test_not_deleted_while_producers_attached_backlog_or_reader_behind() -> None:
    state, victim = draining_cluster(retention=0)
    for figures in ({"producers": 2}, {"backlog": 5}, {"reader_lag": 40}):
        gone, _ = deleted(at(report(state, victim, **figures), 600))
        assert victim not in gone, f"deleted although {figures}"
    gone, _ = deleted(at(report(state, victim), 600))
    assert gone == [victim]


def test_deleted_only_after_retention_and_the_clock_restarts_when_a_blocker_returns() -> None:
    state, victim = draining_cluster(retention=300)
    gone, state = deleted(at(report(state, victim), 10))  # first seen empty at t=10
    assert not gone
    status = next(p.status for p in state.partitions if p.name == victim)
    assert status is not None and status.drained_since == NOW + timedelta(seconds=10)
    gone, state = deleted(at(state, 309))
    assert not gone, "deleted before the retention passed"
    # A named reader turns out to be behind (it committed an older cursor): the clock restarts.
    gone, state = deleted(at(report(state, victim, reader_lag=7), 311))
    assert not gone
    gone, state = deleted(at(report(state, victim), 320))
    gone, state = deleted(at(state, 619))
    assert not gone, "the retention must count from when it was empty again"
    gone, _ = deleted(at(state, 620))
    assert gone == [victim]


def test_local_controller_path_keeps_the_retention_clock_in_the_table() -> None:
    """``hybridmq local`` plans from the assignment table alone: ``drained_since`` travels in it."""
    live = ["mm-0", "mm-1", "mm-2"]
    spec = cluster_spec(retention=60)
    table = plan_assignments([], live, spec=spec, now=NOW).assignments
    lost = plan_assignments(table, live[1:], spec=spec, now=NOW).assignments
    draining = [a for a in lost if a.state == PartitionState.DRAINING]
    assert len(draining) == 1 and draining[0].type == PartitionType.ON_DEMAND
    name = draining[0].name

    def reports(table: Any, **figures: int) -> dict[str, ReplicaReport]:
        a = next(a for a in table if a.name == name)
        return {name: ReplicaReport(a.primary or "", a.epoch, a.in_sync, **figures)}

    def replan(table: Any, seconds: float) -> Any:
        now = NOW + timedelta(seconds=seconds)
        return plan_assignments(table, live[1:], spec=spec, reports=reports(table), now=now).assignments

    t = replan(lost, 5)
    held = next(a for a in t if a.name == name)
    assert held.drained_since == NOW + timedelta(seconds=5)
    t = replan(t, 64)
    assert name in {a.name for a in t}
    t = replan(t, 65)
    assert name not in {a.name for a in t}


# ---- property: over random report histories ---------------------------------------------------------

steps = st.lists(
    st.tuples(
        st.integers(0, 30),  # seconds that pass
        st.sampled_from(["empty", "producers", "backlog", "reader", "stale", "none", "kill"]),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([0, 5, 60]), steps)
def test_never_deleted_before_empty_for_the_whole_retention(retention: int, history: list[Any]) -> None:
    members = tuple(MessageManager(f"mm-{i}") for i in range(4))
    state = ClusterState("gc", cluster_spec(retention), members, (), NOW)
    state = apply_changes(state, plan(state).changes)
    state = replace(
        state,
        message_managers=tuple(
            replace(m, alive=False, lost_reason="pod deleted", lost_since=NOW) if m.name == "mm-0" else m
            for m in members
        ),
    )
    state = apply_changes(state, plan(state).changes)
    # The checker's own view: since when each draining partition was reported empty by its
    # current primary, at its current epoch, without a break.
    empty_since: dict[str, datetime] = {}
    seen_epoch: dict[str, int] = {}
    now = NOW
    for seconds, kind in history:
        now += timedelta(seconds=seconds)
        state = replace(state, now=now)
        if kind == "kill":  # lose one more MM (but keep at least one alive)
            alive = [m for m in state.message_managers if m.alive]
            if len(alive) > 1:
                gone = alive[0].name
                state = replace(
                    state,
                    message_managers=tuple(
                        replace(m, alive=False, lost_reason="lease expired", lost_since=now)
                        if m.name == gone
                        else m
                        for m in state.message_managers
                    ),
                )
        parts = []
        for p in state.partitions:
            s = p.status
            if s is None or s.state != PartitionState.DRAINING or s.primary is None or p.deleting:
                parts.append(p)
                continue
            if seen_epoch.get(p.name) != s.epoch:
                empty_since.pop(p.name, None)
                seen_epoch[p.name] = s.epoch
            figures = {"producers": 0, "backlog": 0, "reader_lag": 0}
            if kind == "producers":
                figures["producers"] = 1
            elif kind == "backlog":
                figures["backlog"] = 3
            elif kind == "reader":
                figures["reader_lag"] = 9
            if kind == "none":
                parts.append(p)
                continue
            epoch = s.epoch - 1 if kind == "stale" and s.epoch > 0 else s.epoch
            rep = ReplicaReport(s.primary, epoch, tuple(s.replicas), log_end_offset=10, **figures)
            if epoch == s.epoch and s.primary in {m.name for m in state.message_managers if m.alive}:
                if any(figures.values()):
                    empty_since.pop(p.name, None)
                else:
                    empty_since.setdefault(p.name, now)
            parts.append(replace(p, report=rep))
        state = replace(state, partitions=tuple(parts))
        result = plan(state)
        alive_now = {m.name for m in state.message_managers if m.alive}
        for change in result.changes:
            if isinstance(change, DeletePartition):
                info = state.partition(change.name)
                assert info is not None and info.status is not None
                assert info.status.primary in alive_now, "deleted without a live primary's report"
                since = empty_since.get(change.name)
                assert since is not None, f"{change.name} deleted without an empty report"
                kept = (now - since).total_seconds()
                assert kept >= retention, f"{change.name} deleted after {kept}s < retention {retention}s"
        state = apply_changes(state, result.changes)
        for p in state.partitions:
            if p.status is not None and p.status.primary not in alive_now:
                empty_since.pop(p.name, None)
