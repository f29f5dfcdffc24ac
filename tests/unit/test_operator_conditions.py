"""Status conditions of a BrokerCluster, one module per condition."""

from __future__ import annotations

from hybridmq_operator.conditions import (
    ClusterObservation,
    Condition,
    PartitionObservation,
    all_replicas_ready,
    cluster_conditions,
    degraded,
    merge_conditions,
    partitions_available,
    ready,
)

LIVE = frozenset({"mm-0", "mm-1", "mm-2"})


def fixed(
    name: str, primary: str | None = "mm-0", in_sync: tuple[str, ...] = ("mm-0", "mm-1")
) -> PartitionObservation:
    return PartitionObservation(name, "fixed", "Active", primary, in_sync, in_sync, 2)


def od(name: str, primary: str = "mm-1", state: str = "Active", accept: bool = True) -> PartitionObservation:
    return PartitionObservation(name, "on-demand", state, primary, (primary,), (primary,), 1, accept)


def obs(parts: tuple[PartitionObservation, ...], **kw: object) -> ClusterObservation:
    base: dict[str, object] = {
        "cm_desired": 2,
        "cm_ready": 2,
        "mm_desired": 3,
        "mm_ready": 3,
        "live_mms": LIVE,
    }
    base.update(kw)
    return ClusterObservation(partitions=parts, **base)  # type: ignore[arg-type]


def test_all_healthy() -> None:
    o = obs((fixed("f0"), od("o0")))
    conds = {c.type: c for c in cluster_conditions(o)}
    assert conds["Ready"].status and conds["PartitionsAvailable"].status
    assert not conds["Degraded"].status


def test_all_replicas_ready_counts_both_roles() -> None:
    c = all_replicas_ready.evaluate(obs((), cm_ready=1, mm_ready=2))
    assert not c.status and "CMs 1/2" in c.message and "MMs 2/3" in c.message
    assert not ready.evaluate(obs((), cm_ready=1)).status


def test_fixed_partition_with_a_lost_primary_is_unavailable() -> None:
    o = obs((fixed("f0", primary="mm-9"), od("o0")))
    c = partitions_available.evaluate(o)
    assert not c.status and c.reason == "FixedPartitionUnavailable" and "f0" in c.message
    assert not ready.evaluate(o).status


def test_no_writable_on_demand_partition() -> None:
    o = obs((fixed("f0"), od("o0", state="Draining", accept=False)))
    assert partitions_available.evaluate(o).reason == "NoWritableOnDemandPartition"
    assert partitions_available.evaluate(o, on_demand_expected=False).status


def test_degraded_on_lost_mm_or_under_replication() -> None:
    assert degraded.evaluate(obs((fixed("f0"),), lost_mms=frozenset({"mm-2"}))).status
    under = degraded.evaluate(obs((fixed("f0", in_sync=("mm-0",)),)))
    assert under.status and "under-replicated" in under.message
    assert not degraded.evaluate(obs((fixed("f0"),))).status


def test_merge_keeps_transition_time_while_status_holds() -> None:
    first = merge_conditions(None, [Condition("Ready", True, "ClusterReady")], "t1", 1)
    same = merge_conditions(first, [Condition("Ready", True, "ClusterReady", "x")], "t2", 2)
    flipped = merge_conditions(same, [Condition("Ready", False, "NotReady")], "t3", 2)
    assert first[0]["lastTransitionTime"] == "t1"
    assert same[0]["lastTransitionTime"] == "t1" and same[0]["observedGeneration"] == 2
    assert flipped[0]["lastTransitionTime"] == "t3" and flipped[0]["status"] == "False"


def test_degraded_when_a_partition_is_below_its_min_in_sync_even_if_mms_were_scaled_down() -> None:
    # One MM asked for, partitions with one copy and minInSync 2: writes are refused, say so.
    lonely = tuple(
        PartitionObservation(f"f{i}", "fixed", "Active", "mm-0", ("mm-0",), ("mm-0",), 2, True, 2)
        for i in range(7)
    )
    c = degraded.evaluate(obs(lonely, mm_desired=1, mm_ready=1))
    assert c.status and c.reason == "BelowMinInSync"
    assert "7 partitions below minInSync" in c.message and "f0 (1/2)" in c.message and "…" in c.message


def test_degraded_counts_under_replicated_partitions_with_their_numbers() -> None:
    c = degraded.evaluate(obs((fixed("f0", in_sync=("mm-0",)), fixed("f1"))))
    assert c.status and c.reason == "ReducedRedundancy"
    assert "1 partitions under-replicated" in c.message and "f0 (1/2)" in c.message and "f1" not in c.message


def test_ready_names_the_pod_that_cannot_start_and_why() -> None:
    stuck = (("hmq-mm-0", "ErrImagePull", "no such image nope:1"),)
    c = ready.evaluate(obs((fixed("f0"), od("o0")), mm_ready=2, pod_problems=stuck))
    assert not c.status and c.reason == "ErrImagePull"
    assert "hmq-mm-0" in c.message and "no such image nope:1" in c.message and "MMs 2/3" in c.message


def test_ready_says_why_children_could_not_be_applied() -> None:
    c = ready.evaluate(obs((fixed("f0"), od("o0")), children_error="applying Service/x: 422: name too long"))
    assert not c.status and c.reason == "ChildrenNotApplied" and "name too long" in c.message


def test_scale_down_blocked_condition_only_while_refused() -> None:
    assert {c.type for c in cluster_conditions(obs((fixed("f0"), od("o0"))))} == {
        "Ready",
        "PartitionsAvailable",
        "Degraded",
    }
    conds = {c.type: c for c in cluster_conditions(obs((fixed("f0"),), scale_down_blocked="refused: x"))}
    assert conds["ScaleDownBlocked"].status and conds["ScaleDownBlocked"].message == "refused: x"


def test_degraded_reports_oversize_mm_reports() -> None:
    c = degraded.evaluate(obs((fixed("f0"),), oversize_reports=(("mm-1", 300000),)))
    assert c.status and "mm-1's report (300000 bytes)" in c.message
