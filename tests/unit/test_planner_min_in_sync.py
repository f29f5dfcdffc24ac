"""The planner never takes a partition below its minInSync copies, and bounds one round's work."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hybridmq.api.resources import BrokerClusterSpec, PartitionState
from hybridmq.planner import (
    ClusterState,
    MessageManager,
    Plan,
    ReplicaReport,
    apply_changes,
    blocked_scale_down,
    plan,
)

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


def cluster_spec(fixed: int, replicas: int, min_in_sync: int, per_mm: int = 1) -> BrokerClusterSpec:
    return BrokerClusterSpec.model_validate(
        {
            "partitions": {
                "fixed": {"count": fixed, "replicas": replicas, "minInSync": min_in_sync},
                "onDemand": {"perMessageManager": per_mm, "replicas": replicas},
            }
        }
    )


def boot(n_mms: int, spec: BrokerClusterSpec) -> ClusterState:
    members = tuple(MessageManager(f"mm-{i}") for i in range(n_mms))
    state = ClusterState("demo", spec, members, (), NOW)
    return apply_changes(state, plan(state).changes)


def in_sync_reports(state: ClusterState) -> ClusterState:
    """Each primary reports every replica in sync (what a healthy cluster says)."""
    parts = []
    for p in state.partitions:
        st = p.status
        if st is not None and st.primary is not None:
            p = replace(p, report=ReplicaReport(st.primary, st.epoch, tuple(st.replicas)))
        parts.append(p)
    return replace(state, partitions=tuple(parts))


def scale_to(state: ClusterState, desired: int) -> ClusterState:
    members = tuple(replace(m, leaving=int(m.name.split("-")[1]) >= desired) for m in state.message_managers)
    return replace(state, message_managers=members, now=state.now + timedelta(seconds=1))


def run(state: ClusterState, rounds: int = 6) -> tuple[Plan, ClusterState]:
    result = Plan()
    for _ in range(rounds):
        result = plan(in_sync_reports(state))
        state = apply_changes(state, result.changes)
    return result, state


def placement(state: ClusterState) -> dict[str, tuple[object, ...]]:
    return {
        p.name: (p.status.primary, p.status.epoch, tuple(p.status.replicas), tuple(p.status.in_sync))
        for p in state.partitions
        if p.status is not None
    }


def copies(state: ClusterState) -> dict[str, int]:
    return {p.name: len(p.status.in_sync) for p in state.partitions if p.status is not None}


def test_scale_down_below_min_in_sync_is_refused_and_nothing_moves() -> None:
    # 3 MMs -> 1 with 2 replicas and minInSync 2: the one MM left could never acknowledge a write.
    state = boot(3, cluster_spec(fixed=4, replicas=2, min_in_sync=2))
    before = placement(state)
    state = scale_to(state, 1)
    result, after = run(state)
    assert placement(after) == before
    assert not result.safe_to_remove and min(copies(after).values()) == 2
    block = blocked_scale_down(after)
    assert block is not None and block.required == 2 and block.staying == 1
    assert set(block.partitions) == set(before)
    assert "minInSync" in block.message and "only 1 message managers would stay" in block.message


def test_scale_down_that_keeps_min_in_sync_goes_ahead() -> None:
    # 3 replicas, minInSync 2, 3 MMs -> 2: every partition keeps 2 in-sync copies.
    state = boot(3, cluster_spec(fixed=4, replicas=3, min_in_sync=2))
    state = scale_to(state, 2)
    assert blocked_scale_down(state) is None
    result, after = run(state)
    assert result.safe_to_remove == frozenset({"mm-2"})
    fixed = {n: c for n, c in copies(after).items() if "fixed" in n}
    assert fixed and min(fixed.values()) >= 2
    assert all("mm-2" not in p.status.replicas for p in after.partitions if p.status and "fixed" in p.name)


def test_no_scale_down_means_no_block() -> None:
    assert blocked_scale_down(boot(3, cluster_spec(fixed=2, replicas=2, min_in_sync=2))) is None


def test_partition_min_in_sync_wins_over_a_lowered_cluster_value() -> None:
    # Partitions created with minInSync 2 keep it when the cluster's value is lowered to 1.
    state = boot(3, cluster_spec(fixed=2, replicas=2, min_in_sync=2))
    state = replace(scale_to(state, 1), spec=cluster_spec(fixed=2, replicas=2, min_in_sync=1))
    block = blocked_scale_down(state)
    assert block is not None and block.required == 2


def test_creation_is_bounded_per_round_and_finishes_over_rounds() -> None:
    spec = cluster_spec(fixed=250, replicas=2, min_in_sync=2)
    members = tuple(MessageManager(f"mm-{i}") for i in range(3))
    state = ClusterState("demo", spec, members, (), NOW)
    sizes = []
    for _ in range(5):
        result = plan(state, max_creates=100)
        sizes.append(len(result.creates()))
        state = apply_changes(state, result.changes)
    assert sizes == [100, 100, 53, 0, 0]  # 250 fixed, then one on-demand partition per MM
    names = {p.name for p in state.partitions}
    assert {f"demo-fixed-{i}" for i in range(250)} <= names and len(names) == 253
    assert all(p.status is not None and p.status.state == PartitionState.ACTIVE for p in state.partitions)
    # Unbounded (the local controller) still does it in one round.
    assert len(plan(ClusterState("demo", spec, members, (), NOW)).creates()) == 253


def test_a_refused_scale_down_still_replaces_lost_replicas_on_any_mm() -> None:
    state = scale_to(boot(3, cluster_spec(fixed=4, replicas=2, min_in_sync=2)), 1)
    members = tuple(
        replace(m, alive=False, lost_reason="pod deleted", lost_since=state.now) if m.name == "mm-2" else m
        for m in state.message_managers
    )
    _, after = run(replace(state, message_managers=members))
    fixed = {n: p for n, p in placement(after).items() if "fixed" in n}  # on-demand ones drain
    assert len(fixed) == 4
    for name, (primary, replicas) in ((n, (p[0], p[2])) for n, p in fixed.items()):
        # mm-1 would be removed by the refused scale-down; it still takes replacement replicas.
        assert primary is not None and len(replicas) == 2 and "mm-2" not in replicas, name
