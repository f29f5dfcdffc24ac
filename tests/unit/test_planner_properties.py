"""Property tests of the planner's invariants over random histories.

A history starts a cluster and then applies random events (MMs lost, returning, added, leaving,
removed once evacuated, readiness flaps, primaries' ISR reports, MMs' offset and storage reports);
after each event the planner runs, its plan is checked against the state it saw, and applied.
"""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hybridmq.api.assignment import PartitionState, PartitionType
from hybridmq.api.resources import PARTITION_FINALIZER, BrokerClusterSpec, PartitionStatus
from hybridmq.planner import (
    ClusterState,
    CreatePartition,
    DeletePartition,
    MessageManager,
    MessageManagersEvacuated,
    Plan,
    ReleaseFinalizer,
    ReplicaReport,
    UpdatePartitionStatus,
    apply_changes,
    blocked_scale_down,
    plan,
)

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)

events = st.lists(
    st.one_of(
        st.tuples(st.just("kill"), st.integers(0, 7)),
        st.tuples(st.just("revive"), st.integers(0, 7)),
        st.tuples(st.just("add"), st.just(0)),
        st.tuples(st.just("leave"), st.integers(0, 7)),
        st.tuples(st.just("stay"), st.integers(0, 7)),
        st.tuples(st.just("remove"), st.just(0)),
        st.tuples(st.just("unready"), st.integers(0, 7)),
        st.tuples(st.just("report"), st.integers(0, 2**32)),
        st.tuples(st.just("drain"), st.integers(0, 2**32)),
        st.tuples(st.just("offsets"), st.integers(0, 2**32)),
        st.tuples(st.just("stored"), st.integers(0, 2**32)),
    ),
    min_size=1,
    max_size=25,
)


@st.composite
def clusters(draw: Any) -> ClusterState:
    replicas = draw(st.integers(1, 3))
    spec = BrokerClusterSpec.model_validate(
        {
            "partitions": {
                "fixed": {
                    "count": draw(st.integers(0, 8)),
                    "replicas": replicas,
                    "minInSync": draw(st.integers(1, replicas)),
                },
                "onDemand": {
                    "perMessageManager": draw(st.integers(0, 2)),
                    "replicas": draw(st.integers(1, 3)),
                    "acceptWritesAfterFailover": draw(st.booleans()),
                    "retentionAfterDrainSeconds": draw(st.sampled_from([0, 2])),
                },
            }
        }
    )
    n = draw(st.integers(0, 5))
    members = tuple(MessageManager(f"mm-{i}") for i in range(n))
    return ClusterState("p", spec, members, (), NOW)


def _mm(state: ClusterState, index: int) -> str | None:
    if not state.message_managers:
        return None
    return state.message_managers[index % len(state.message_managers)].name


def _set(state: ClusterState, name: str | None, **changes: Any) -> ClusterState:
    members = tuple(replace(m, **changes) if m.name == name else m for m in state.message_managers)
    return replace(state, message_managers=members)


def _with_reports(state: ClusterState, seed: int, drain: bool) -> ClusterState:
    rng = random.Random(seed)
    parts = []
    for p in state.partitions:
        s = p.status
        if s is not None and s.primary is not None and not p.deleting and rng.random() < 0.8:
            in_sync = tuple(r for r in s.replicas if rng.random() < 0.7)
            report = ReplicaReport(
                reporter=s.primary,
                epoch=s.epoch if rng.random() < 0.9 else max(0, s.epoch - 1),
                in_sync=in_sync,
                log_end_offset=rng.randint(0, 100),
                backlog=0 if drain or rng.random() < 0.5 else rng.randint(1, 50),
                producers=0 if drain or rng.random() < 0.5 else rng.randint(1, 3),
                reader_lag=0 if drain or rng.random() < 0.5 else rng.randint(1, 9),
            )
            p = replace(p, report=report)
        parts.append(p)
    return replace(state, partitions=tuple(parts))


def _with_offsets(state: ClusterState, seed: int) -> ClusterState:
    rng = random.Random(seed)
    names = [p.name for p in state.partitions]
    members = tuple(
        replace(m, log_end_offsets={n: rng.randint(0, 100) for n in names}) for m in state.message_managers
    )
    return replace(state, message_managers=members)


def _with_stored(state: ClusterState, seed: int) -> ClusterState:
    rng = random.Random(seed)
    members = []
    for m in state.message_managers:
        held = frozenset(
            p.name
            for p in state.partitions
            if p.status and m.name in p.status.replicas and rng.random() < 0.5
        )
        members.append(replace(m, stored=held))
    return replace(state, message_managers=tuple(members))


def _event(
    state: ClusterState, event: tuple[str, int], last: Plan | None, counter: list[int]
) -> ClusterState:
    kind, arg = event
    state = replace(state, now=state.now + timedelta(seconds=1))
    if kind == "kill":
        return _set(state, _mm(state, arg), alive=False, lost_reason="pod deleted", lost_since=state.now)
    if kind == "revive":
        return _set(state, _mm(state, arg), alive=True, ready=True, lost_reason=None, lost_since=None)
    if kind == "add":
        counter[0] += 1
        return replace(state, message_managers=(*state.message_managers, MessageManager(f"mm-x{counter[0]}")))
    if kind == "leave":
        return _set(state, _mm(state, arg), leaving=True)
    if kind == "stay":
        return _set(state, _mm(state, arg), leaving=False)
    if kind == "unready":
        return _set(state, _mm(state, arg), ready=False)
    if kind == "remove":
        gone = last.safe_to_remove if last else frozenset()
        return replace(state, message_managers=tuple(m for m in state.message_managers if m.name not in gone))
    if kind in ("report", "drain"):
        return _with_reports(state, arg, drain=kind == "drain")
    if kind == "offsets":
        return _with_offsets(state, arg)
    if kind == "stored":
        return _with_stored(state, arg)
    raise AssertionError(kind)


def _check_status(name: str, s: PartitionStatus) -> None:
    assert len(set(s.replicas)) == len(s.replicas), f"{name}: two replicas on one MM: {s.replicas}"
    assert set(s.in_sync) <= set(s.replicas), f"{name}: in-sync outside replicas"
    if s.primary is not None:
        assert s.primary in s.in_sync, f"{name}: primary {s.primary} not in sync {s.in_sync}"
        assert s.replicas[0] == s.primary, f"{name}: primary is not rank 0"


def _allowed_in_sync(state: ClusterState, name: str) -> set[str]:
    """In-sync replicas as the planner may legitimately know them: the status, or the primary's
    current report."""
    info = state.partition(name)
    assert info is not None and info.status is not None
    s = info.status
    rep = info.report
    if rep is not None and s.primary is not None and rep.epoch == s.epoch and rep.reporter == s.primary:
        return ({s.primary} | set(rep.in_sync)) & set(s.replicas)
    return set(s.in_sync)


def _offset(state: ClusterState, mm: str, name: str, s: PartitionStatus) -> int:
    for m in state.message_managers:
        if m.name == mm and name in m.log_end_offsets:
            return m.log_end_offsets[name]
    return s.replica_offsets.get(mm, -1)


def _check_plan(state: ClusterState, result: Plan, max_epoch: dict[str, int]) -> None:
    mms = {m.name: m for m in state.message_managers}
    # A refused scale-down (minInSync) does not happen: the MMs it would remove stay eligible.
    refused = blocked_scale_down(state) is not None
    eligible = {m.name for m in state.message_managers if m.alive and m.ready and (refused or not m.leaving)}
    alive = {m.name for m in state.message_managers if m.alive}
    updated = {c.name: c.status for c in result.changes if isinstance(c, UpdatePartitionStatus)}
    for change in result.changes:
        if isinstance(change, CreatePartition):
            assert state.partition(change.name) is None, f"{change.name} created twice"
            _check_status(change.name, change.status)
            assert set(change.status.replicas) <= eligible
            assert change.status.in_sync == change.status.replicas  # empty logs
        elif isinstance(change, UpdatePartitionStatus):
            info = state.partition(change.name)
            assert info is not None and not info.deleting
            old = info.status or PartitionStatus()
            new = change.status
            _check_status(change.name, new)
            assert new.epoch >= old.epoch, f"{change.name}: epoch went down"
            assert new.epoch >= max_epoch.get(change.name, 0)
            added = set(new.replicas) - set(old.replicas)
            assert added <= eligible, f"{change.name}: replica placed on a non-eligible MM {added - eligible}"
            if old.replicas and new.primary is not None and new.primary != old.primary:
                # A promotion: only an in-sync replica, at the next epoch.
                allowed = _allowed_in_sync(state, change.name)
                assert new.primary in allowed, f"{change.name}: promoted out-of-sync {new.primary}"
                assert new.epoch > old.epoch  # +1, or +2 when a failover lands on a leaving MM
                if old.primary is not None and old.primary not in alive:
                    # Failover after a loss: the longest in-sync log wins.
                    candidates = [r for r in old.replicas if r in allowed and r in alive and r != old.primary]
                    best = max(_offset(state, r, change.name, old) for r in candidates)
                    longest = [r for r in candidates if _offset(state, r, change.name, old) == best]
                    if _offset(state, new.primary, change.name, old) != best:
                        # Only when the longest log sat on a leaving MM, which then handed over.
                        assert all(mms[r].leaving for r in longest), f"{change.name}: not the longest log"
                        assert new.epoch == old.epoch + 2
            if new.primary is None:
                assert new.epoch == old.epoch
            if old.state == PartitionState.DRAINED:
                assert new.state == PartitionState.DRAINED
            if info.spec.type == PartitionType.FIXED:
                assert new.state not in (PartitionState.DRAINING, PartitionState.DRAINED)
        elif isinstance(change, DeletePartition):
            info = state.partition(change.name)
            assert info is not None and info.spec.type == PartitionType.ON_DEMAND
            current = updated.get(change.name) or info.status
            assert current is not None and current.state == PartitionState.DRAINED, "deleted before drained"
            assert current.backlog == 0 and current.producers == 0 and current.reader_lag == 0
        elif isinstance(change, ReleaseFinalizer):
            info = state.partition(change.name)
            assert info is not None and info.deleting and PARTITION_FINALIZER in info.finalizers
            replicas = info.status.replicas if info.status else []
            for m in mms.values():
                if not m.alive:
                    continue
                if m.stored is None:
                    assert m.name not in replicas, f"released while {m.name} may hold data"
                else:
                    assert change.name not in m.stored, f"released while {m.name} holds data"
        elif isinstance(change, MessageManagersEvacuated):
            assert set(change.names) == result.safe_to_remove
    for mm in result.safe_to_remove:
        assert mms[mm].leaving
        for p in state.partitions:
            s = updated.get(p.name) or p.status
            if s is not None and not p.deleting and s.state != PartitionState.DRAINED:
                assert mm not in s.replicas, f"{mm} reported safe but still holds {p.name}"


def _check_state(state: ClusterState) -> None:
    per_mm = state.spec.partitions.on_demand.per_message_manager
    writable: dict[str, int] = {}
    for p in state.partitions:
        if p.status is not None:
            _check_status(p.name, p.status)
            s = p.status
            if (
                p.spec.type == PartitionType.ON_DEMAND
                and s.state == PartitionState.ACTIVE
                and s.accept_writes
                and s.primary
                and not p.deleting
            ):
                writable[s.primary] = writable.get(s.primary, 0) + 1
    fixed = sum(1 for p in state.partitions if p.spec.type == PartitionType.FIXED)
    assert fixed >= state.spec.partitions.fixed.count
    for m in state.message_managers:
        if m.eligible:
            assert writable.get(m.name, 0) >= per_mm, f"FIG. 7: {m.name} lacks on-demand partitions"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), events)
def test_invariants_hold_over_random_histories(start: ClusterState, history: list[tuple[str, int]]) -> None:
    state = start
    max_epoch: dict[str, int] = {}
    last: Plan | None = None
    counter = [0]
    for event in [("report", 0), *history]:
        state = _event(state, event, last, counter)
        result = plan(state)
        _check_plan(state, result, max_epoch)
        state = apply_changes(state, result.changes)
        _check_state(state)
        for p in state.partitions:
            if p.status is not None:
                assert p.status.epoch >= max_epoch.get(p.name, 0), f"{p.name}: epoch went down"
                max_epoch[p.name] = p.status.epoch
        # Level-based and idempotent: planning again on the result changes no status.
        again = plan(state)
        assert not [c for c in again.changes if isinstance(c, (UpdatePartitionStatus, CreatePartition))], (
            again
        )
        last = result
