"""Failure-domain placement: each fixed partition's replicas in different domains when there are
enough, a clear fallback when there are not, and the verdict the BrokerCluster status shows."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hybridmq.api.resources import BrokerClusterSpec
from hybridmq.planner import (
    ClusterState,
    MessageManager,
    ReplicaReport,
    UpdatePartitionStatus,
    apply_changes,
    domain_spread,
    plan,
)

T0 = datetime(2026, 11, 26, 9, 0, tzinfo=UTC)


def cluster_spec(fixed: int, replicas: int) -> BrokerClusterSpec:
    return BrokerClusterSpec.model_validate(
        {
            "messageManagers": {"topologyKey": "topology.kubernetes.io/zone"},
            "partitions": {
                "fixed": {"count": fixed, "replicas": replicas, "minInSync": 1},
                "onDemand": {"perMessageManager": 1, "replicas": 2},
            },
        }
    )


def members(zones: dict[str, str | None]) -> tuple[MessageManager, ...]:
    return tuple(MessageManager(name, domain=zone) for name, zone in zones.items())


def run(state: ClusterState, rounds: int = 1, in_sync: bool = True) -> ClusterState:
    """Plan and apply ``rounds`` times; between rounds every primary reports its replicas in sync."""
    for _ in range(rounds):
        state = apply_changes(state, plan(state).changes)
        if in_sync:
            state = replace(
                state,
                partitions=tuple(
                    replace(
                        p,
                        report=ReplicaReport(p.status.primary, p.status.epoch, tuple(p.status.replicas)),
                    )
                    if p.status is not None and p.status.primary is not None
                    else p
                    for p in state.partitions
                ),
                now=state.now + timedelta(seconds=1),
            )
    return state


def fixed_replicas(state: ClusterState) -> dict[str, list[str]]:
    return {
        p.name: list(p.status.replicas)
        for p in state.partitions
        if p.spec.type.value == "fixed" and p.status is not None
    }


ZONES = {"mm-0": "a", "mm-1": "a", "mm-2": "b", "mm-3": "b"}


def test_each_fixed_partitions_replicas_go_to_different_domains() -> None:
    state = run(ClusterState("demo", cluster_spec(8, 2), members(ZONES), (), T0))
    placed = fixed_replicas(state)
    assert len(placed) == 8
    for name, replicas in placed.items():
        assert len(set(replicas)) == 2 and {ZONES[r] for r in replicas} == {"a", "b"}, (name, replicas)
    # Load still spreads within the domains: every MM holds some.
    assert {r for reps in placed.values() for r in reps} == set(ZONES)
    verdict = domain_spread(state)
    assert verdict.spread and verdict.reason == "Spread" and verdict.partitions == ()


def test_fewer_domains_than_replicas_falls_back_to_distinct_mms_and_says_so() -> None:
    zones = {"mm-0": "a", "mm-1": "a", "mm-2": "b"}
    state = run(ClusterState("demo", cluster_spec(3, 3), members(zones), (), T0))
    for name, replicas in fixed_replicas(state).items():
        # Three copies on three MMs over the two domains there are.
        assert sorted(replicas) == ["mm-0", "mm-1", "mm-2"], name
    verdict = domain_spread(state)
    assert not verdict.spread and verdict.reason == "NotEnoughDomains"
    assert verdict.partitions == ("demo-fixed-0", "demo-fixed-1", "demo-fixed-2")
    assert "only 2 failure domains (topology.kubernetes.io/zone)" in verdict.message


def test_a_lost_replica_is_replaced_in_the_domain_it_leaves_empty() -> None:
    state = run(ClusterState("demo", cluster_spec(4, 2), members(ZONES), (), T0), rounds=2)
    name, replicas = next((n, r) for n, r in fixed_replicas(state).items())
    lost = replicas[1]
    state = replace(
        state,
        message_managers=tuple(
            replace(m, alive=False, lost_reason="pod deleted", lost_since=state.now) if m.name == lost else m
            for m in state.message_managers
        ),
    )
    state = run(state)
    after = fixed_replicas(state)[name]
    assert lost not in after and len(after) == 2
    assert {ZONES[r] for r in after} == {"a", "b"}, after


def test_partitions_placed_before_the_domains_were_known_are_moved_apart() -> None:
    # Placed while every node said zone "a" (or nothing); then two nodes turn out to be zone "b".
    before = {"mm-0": "a", "mm-1": "a", "mm-2": "a", "mm-3": "a"}
    state = run(ClusterState("demo", cluster_spec(6, 2), members(before), (), T0), rounds=2)
    state = replace(state, message_managers=members(ZONES))
    verdict = domain_spread(state)
    assert not verdict.spread and verdict.reason == "ReplicasShareDomain"
    shared = set(verdict.partitions)
    assert shared == {n for n, r in fixed_replicas(state).items() if len({ZONES[m] for m in r}) == 1}
    assert shared

    # First round: an extra backup in the other domain; nothing removed while it catches up.
    changes = plan(state).changes
    grown = {
        c.name: c.status.replicas
        for c in changes
        if isinstance(c, UpdatePartitionStatus) and len(c.status.replicas) == 3
    }
    assert set(grown) == shared
    state = run(state, in_sync=False)
    state = run(state, in_sync=False)
    assert all(len(fixed_replicas(state)[n]) == 3 for n in shared)
    # Once in sync, a replica of the shared domain goes and the partition is spread.
    state = run(state, rounds=3)
    for name, replicas in fixed_replicas(state).items():
        assert len(replicas) == 2 and {ZONES[r] for r in replicas} == {"a", "b"}, (name, replicas)
    assert domain_spread(state).reason == "Spread"


def test_unknown_domains_are_reported() -> None:
    zones: dict[str, str | None] = {"mm-0": "a", "mm-1": None, "mm-2": "b"}
    state = run(ClusterState("demo", cluster_spec(3, 2), members(zones), (), T0))
    assert any("mm-1" in r for r in fixed_replicas(state).values())
    verdict = domain_spread(state)
    assert not verdict.spread and verdict.reason == "DomainsUnknown" and "mm-1" in verdict.message
    # Without any domain, placement is what it always was: distinct MMs, least loaded.
    plain = run(ClusterState("demo", cluster_spec(3, 2), members(dict.fromkeys(ZONES)), (), T0))
    assert all(len(set(r)) == 2 for r in fixed_replicas(plain).values())
    assert domain_spread(plain).reason == "DomainsUnknown"
