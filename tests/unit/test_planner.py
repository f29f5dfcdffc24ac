"""The planner by example: placement, failover, on-demand lifecycle, scaling."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from hybridmq.api.assignment import PartitionAssignment, PartitionState, PartitionType
from hybridmq.api.resources import BrokerClusterSpec, PartitionSpec, PartitionStatus
from hybridmq.planner import (
    ClusterState,
    CreatePartition,
    DeletePartition,
    MessageManager,
    MessageManagersEvacuated,
    PartitionInfo,
    Plan,
    ReleaseFinalizer,
    ReplicaReport,
    UpdatePartitionStatus,
    apply_changes,
    natural_key,
    ondemand_name,
    pick_on_demand_partition,
    plan,
    plan_assignments,
    reassign_producers,
)
from hybridmq.planner.draft import Draft

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


def spec(
    fixed: int = 3, replicas: int = 2, per_mm: int = 1, accept: bool = False, retention: int = 0, **extra: Any
) -> BrokerClusterSpec:
    return BrokerClusterSpec.model_validate(
        {
            "partitions": {
                "fixed": {"count": fixed, "replicas": replicas, "minInSync": min(2, replicas)},
                "onDemand": {
                    "perMessageManager": per_mm,
                    "acceptWritesAfterFailover": accept,
                    "replicas": replicas,
                    "retentionAfterDrainSeconds": retention,
                },
            },
            **extra,
        }
    )


def mms(*names: str, **flags: dict[str, Any]) -> tuple[MessageManager, ...]:
    return tuple(MessageManager(n, **flags.get(n.replace("-", "_"), {})) for n in names)


def boot(n_mms: int = 3, **kw: Any) -> ClusterState:
    """A cluster whose first plan has been applied."""
    state = ClusterState("demo", spec(**kw), mms(*(f"mm-{i}" for i in range(n_mms))), (), NOW)
    return apply_changes(state, plan(state).changes)


def statuses(state: ClusterState) -> dict[str, PartitionStatus]:
    return {p.name: p.status for p in state.partitions if p.status is not None}


def with_mms(state: ClusterState, *members: MessageManager, later: float = 1.0) -> ClusterState:
    return replace(state, message_managers=members, now=state.now + timedelta(seconds=later))


def lose(state: ClusterState, name: str, reason: str = "pod deleted") -> ClusterState:
    members = tuple(
        replace(m, alive=False, lost_reason=reason, lost_since=state.now) if m.name == name else m
        for m in state.message_managers
    )
    return with_mms(state, *members)


def step(state: ClusterState) -> tuple[Plan, ClusterState]:
    result = plan(state)
    return result, apply_changes(state, result.changes)


def report_all(state: ClusterState, backlog: int = 0, producers: int = 0) -> ClusterState:
    """Every primary reports all its replicas in sync, and the given figures."""
    parts = []
    for p in state.partitions:
        st = p.status
        if st is not None and st.primary is not None:
            rep = ReplicaReport(
                reporter=st.primary,
                epoch=st.epoch,
                in_sync=tuple(st.replicas),
                log_end_offset=100,
                backlog=backlog,
                producers=producers,
            )
            p = replace(p, report=rep)
        parts.append(p)
    return replace(state, partitions=tuple(parts))


def assert_sane(state: ClusterState) -> None:
    for name, st in statuses(state).items():
        assert len(set(st.replicas)) == len(st.replicas), name
        assert set(st.in_sync) <= set(st.replicas), name
        if st.primary is not None:
            assert st.primary in st.in_sync and st.replicas[0] == st.primary, name


# ---- creation and placement -----------------------------------------------------------------------


def test_first_plan_creates_fixed_and_one_on_demand_per_mm() -> None:
    state = ClusterState("demo", spec(fixed=6), mms("mm-0", "mm-1", "mm-2"), (), NOW)
    result = plan(state)
    creates = result.creates()
    assert all(isinstance(c, CreatePartition) for c in result.changes)
    fixed = [c for c in creates if c.spec.type == PartitionType.FIXED]
    od = [c for c in creates if c.spec.type == PartitionType.ON_DEMAND]
    assert [c.name for c in fixed] == [f"demo-fixed-{i}" for i in range(6)]
    assert sorted(c.status.primary or "" for c in od) == ["mm-0", "mm-1", "mm-2"]  # FIG. 7: one per MM
    for c in creates:
        assert c.status.state == PartitionState.ACTIVE and c.status.epoch == 0
        assert len(c.status.replicas) == 2 and len(set(c.status.replicas)) == 2
        assert c.status.in_sync == c.status.replicas  # empty logs are in sync
        assert c.labels["hybridmq.io/cluster"] == "demo"
        assert c.reason == "PartitionCreated" and c.message
    # spread: primaries and replicas balanced
    primaries = Counter(c.status.primary for c in creates)
    replicas = Counter(r for c in creates for r in c.status.replicas)
    assert max(primaries.values()) - min(primaries.values()) <= 1
    assert max(replicas.values()) - min(replicas.values()) <= 1


def test_planning_is_deterministic_and_idempotent() -> None:
    state = ClusterState("demo", spec(fixed=5), mms("mm-0", "mm-1", "mm-2"), (), NOW)
    assert plan(state) == plan(state)
    after = apply_changes(state, plan(state).changes)
    assert plan(after).changes == ()


def test_no_mm_yet_means_pending_then_placed() -> None:
    state = ClusterState("demo", spec(fixed=2), (), (), NOW)
    result, state = step(state)
    assert [c.status.state for c in result.creates()] == [PartitionState.PENDING] * 2
    assert all(not c.status.replicas for c in result.creates())
    result, state = step(with_mms(state, *mms("mm-0", "mm-1")))
    placed = {u.name: u.status for u in result.updates()}
    assert placed["demo-fixed-0"].state == PartitionState.ACTIVE
    assert sorted(placed["demo-fixed-0"].replicas) == ["mm-0", "mm-1"]
    assert len(result.creates()) == 2  # the on-demand partitions of the two MMs
    assert_sane(state)


def test_fewer_mms_than_replicas_never_doubles_up() -> None:
    state = ClusterState("demo", spec(fixed=2, replicas=3), mms("mm-0", "mm-1"), (), NOW)
    result, state = step(state)
    for c in result.creates():
        assert len(c.status.replicas) == 2 and len(set(c.status.replicas)) == 2
        assert c.status.state == PartitionState.ACTIVE  # serving, under-replicated
        (under,) = [x for x in c.status.conditions if x.type == "UnderReplicated"]
        assert under.status == "True" and under.message == "2 of 3 replicas in sync"
    _, state = step(with_mms(state, *mms("mm-0", "mm-1", "mm-2")))
    for name, st in statuses(state).items():
        if "fixed" not in name:
            continue
        assert sorted(st.replicas) == ["mm-0", "mm-1", "mm-2"]
        assert st.state == PartitionState.ACTIVE
        assert st.replicas[2] not in st.in_sync  # the late backup catches up first


def test_fixed_count_grows_and_never_shrinks() -> None:
    state = boot(fixed=2)
    grown = replace(state, spec=spec(fixed=4))
    result, state = step(grown)
    assert sorted(c.name for c in result.creates()) == ["demo-fixed-2", "demo-fixed-3"]
    result, state = step(replace(state, spec=spec(fixed=1)))
    assert not result.deletes() and len([p for p in state.partitions if "fixed" in p.name]) == 4


# ---- fixed failover ---------------------------------------------------------------------------------


def fixed_state(
    replicas: list[str], in_sync: list[str], offsets: dict[str, int], epoch: int = 3
) -> ClusterState:
    st = PartitionStatus(
        state=PartitionState.ACTIVE, epoch=epoch, primary=replicas[0], replicas=replicas, in_sync=in_sync
    )
    info = PartitionInfo(
        "demo-fixed-0", PartitionSpec(cluster="demo", type="fixed", replicas=len(replicas)), st
    )
    members = tuple(
        MessageManager(n, log_end_offsets={"demo-fixed-0": offsets[n]} if n in offsets else {})
        for n in ["mm-0", "mm-1", "mm-2", "mm-3"]
    )
    return ClusterState("demo", spec(fixed=1, replicas=len(replicas), per_mm=0), members, (info,), NOW)


def test_primary_loss_promotes_longest_in_sync_log() -> None:
    state = fixed_state(["mm-0", "mm-1", "mm-2"], ["mm-0", "mm-1", "mm-2"], {"mm-1": 90, "mm-2": 95})
    result = plan(lose(state, "mm-0"))
    (upd,) = result.updates()
    st = upd.status
    assert st.primary == "mm-2" and st.epoch == 4
    assert "mm-0" not in st.replicas and "mm-0" not in st.in_sync
    assert st.replicas[:2] == ["mm-2", "mm-1"] and st.replicas[2] == "mm-3"  # replacement backup
    assert st.in_sync == ["mm-2", "mm-1"]
    assert st.state == PartitionState.ACTIVE
    assert st.last_failover is not None
    assert (st.last_failover.from_, st.last_failover.to, st.last_failover.reason) == (
        "mm-0",
        "mm-2",
        "pod deleted",
    )
    assert [e.reason for e in upd.events] == ["FailedOver", "ReplicaPlaced"]
    assert upd.events[0].warning and "epoch 4" in upd.message


def test_ties_go_to_the_lowest_rank() -> None:
    state = fixed_state(["mm-0", "mm-2", "mm-1"], ["mm-0", "mm-2", "mm-1"], {"mm-1": 50, "mm-2": 50})
    (upd,) = plan(lose(state, "mm-0")).updates()
    assert upd.status.primary == "mm-2"


def test_out_of_sync_replica_is_never_promoted_even_with_a_longer_log() -> None:
    state = fixed_state(["mm-0", "mm-1", "mm-2"], ["mm-0", "mm-1"], {"mm-1": 10, "mm-2": 999})
    (upd,) = plan(lose(state, "mm-0")).updates()
    assert upd.status.primary == "mm-1"


def test_no_in_sync_replica_alive_goes_offline_then_the_returning_one_takes_over() -> None:
    state = fixed_state(["mm-0", "mm-1"], ["mm-0"], {"mm-1": 999})
    result, after = step(lose(state, "mm-0", "lease expired"))
    (upd,) = result.updates()
    assert upd.status.primary is None and upd.status.epoch == 3
    assert upd.status.state == PartitionState.MIGRATING
    assert upd.status.in_sync == ["mm-0"] and upd.status.replicas == ["mm-0", "mm-1"]  # kept for recovery
    assert result.offline == ("demo-fixed-0",)
    assert upd.events[0].reason == "PartitionOffline"
    # Nothing changes while it stays lost.
    assert plan(after).changes == ()
    back = with_mms(after, *(replace(m, alive=True) for m in after.message_managers))
    (upd2,) = plan(back).updates()
    assert upd2.status.primary == "mm-0" and upd2.status.epoch == 4
    assert upd2.status.state == PartitionState.ACTIVE
    # The end of mm-0's failover, as long as from its loss: lost 1 s before the offline round, back
    # 1 s after it (the history completes mm-0's failover with it).
    last = upd2.status.last_failover
    assert last is not None
    assert (last.from_, last.to, last.reason, last.duration_seconds) == ("mm-0", "mm-0", "lease expired", 2.0)


def test_lost_backup_is_replaced_and_primary_kept() -> None:
    state = fixed_state(["mm-0", "mm-1"], ["mm-0", "mm-1"], {})
    (upd,) = plan(lose(state, "mm-1")).updates()
    assert upd.status.primary == "mm-0" and upd.status.epoch == 3
    assert upd.status.replicas == ["mm-0", "mm-2"] and upd.status.in_sync == ["mm-0"]
    assert [e.reason for e in upd.events] == ["ReplicaLost", "ReplicaPlaced"]


def test_no_spare_mm_leaves_the_partition_migrating_until_one_appears() -> None:
    state = boot(n_mms=2, fixed=2, per_mm=0)
    _, state = step(lose(state, "mm-0"))
    for st in statuses(state).values():
        assert st.primary == "mm-1" and st.replicas == ["mm-1"]
        assert st.state == PartitionState.MIGRATING
    _, state = step(with_mms(state, *state.message_managers, MessageManager("mm-2")))
    for st in statuses(state).values():
        assert st.replicas == ["mm-1", "mm-2"] and st.state == PartitionState.ACTIVE


def test_returning_mm_joins_as_backup_and_nothing_moves_back() -> None:
    state = boot(n_mms=3, fixed=6)
    _, state = step(lose(state, "mm-0"))
    before = statuses(state)
    state = report_all(state)
    _, state = step(state)
    back = with_mms(state, *(replace(m, alive=True, lost_reason=None) for m in state.message_managers))
    result = plan(back)
    for upd in result.updates():
        assert upd.status.primary == before[upd.name].primary  # no primary moves back
        assert "mm-0" not in upd.status.replicas
    # It gets its own on-demand partition (FIG. 7).
    (create,) = result.creates()
    assert create.spec.type == PartitionType.ON_DEMAND and create.status.primary == "mm-0"


def test_reports_move_replicas_into_sync_and_stale_ones_are_ignored() -> None:
    _, state = step(fixed_state(["mm-0", "mm-1"], ["mm-0"], {}))
    (info,) = state.partitions
    stale = replace(info, report=ReplicaReport("mm-0", epoch=2, in_sync=("mm-0", "mm-1")))
    assert plan(replace(state, partitions=(stale,))).changes == ()
    not_primary = replace(info, report=ReplicaReport("mm-1", epoch=3, in_sync=("mm-0", "mm-1")))
    assert plan(replace(state, partitions=(not_primary,))).changes == ()
    fresh = replace(info, report=ReplicaReport("mm-0", epoch=3, in_sync=("mm-1",), backlog=5))
    (upd,) = plan(replace(state, partitions=(fresh,))).updates()
    assert upd.status.in_sync == ["mm-0", "mm-1"]  # the primary stays in sync whatever it says
    assert upd.status.backlog == 5 and upd.status.reported_epoch == 3
    assert upd.events[0].reason == "ReplicaInSync"


# ---- on-demand lifecycle ----------------------------------------------------------------------------


def od_of(state: ClusterState, primary: str) -> str:
    for name, st in statuses(state).items():
        if "-od-" in name and st.primary == primary and st.state == PartitionState.ACTIVE:
            return name
    raise AssertionError(f"no on-demand partition on {primary}")


def test_on_demand_failover_drains_without_writes() -> None:
    state = boot(n_mms=3, fixed=0)
    victim = od_of(state, "mm-0")
    result, state = step(lose(state, "mm-0"))
    upd = next(u for u in result.updates() if u.name == victim)
    assert upd.status.state == PartitionState.DRAINING and upd.status.accept_writes is False
    assert upd.status.primary in ("mm-1", "mm-2") and upd.status.epoch == 1
    assert "mm-0" not in upd.status.replicas
    assert [e.reason for e in upd.events] == ["FailedOver", "Draining"]
    assert not result.creates()  # the survivors already have their own on-demand partition
    # producers of the old partition move to a writable one on a surviving MM
    table = [
        PartitionAssignment(
            name=n,
            type=PartitionType.ON_DEMAND,
            state=st.state,
            epoch=st.epoch,
            primary=st.primary,
            replicas=tuple(st.replicas),
            accept_writes=st.accept_writes,
        )
        for n, st in statuses(state).items()
    ]
    target = pick_on_demand_partition(table, "producer-1")
    assert target is not None and target != victim
    assert statuses(state)[target].primary in ("mm-1", "mm-2")


def test_accept_writes_after_failover_is_honoured() -> None:
    state = boot(n_mms=2, fixed=0, accept=True)
    victim = od_of(state, "mm-0")
    _, state = step(lose(state, "mm-0"))
    st = statuses(state)[victim]
    assert st.state == PartitionState.DRAINING and st.accept_writes is True


def test_drained_partition_is_deleted_and_finalizer_released_after_data_is_gone() -> None:
    state = boot(n_mms=3, fixed=0)
    victim = od_of(state, "mm-0")
    _, state = step(lose(state, "mm-0"))
    # Backlog figures from before the failover don't count: no report at the new epoch yet.
    assert not plan(state).deletes()
    busy = report_all(state, backlog=7)
    _, state = step(busy)
    assert statuses(state)[victim].state == PartitionState.DRAINING
    attached = report_all(state, backlog=0, producers=1)
    assert not plan(attached).deletes()
    result, state = step(report_all(state, backlog=0, producers=0))
    upd = next(u for u in result.updates() if u.name == victim)
    assert upd.status.state == PartitionState.DRAINED and upd.events[-1].reason == "Drained"
    assert [d.name for d in result.deletes()] == [victim]
    assert all(isinstance(c, (UpdatePartitionStatus, DeletePartition)) for c in result.changes)
    # Deleting: MMs that have not reported what they store hold the finalizer.
    assert next(p for p in state.partitions if p.name == victim).deleting
    assert not plan(state).releases()
    holder = statuses(state)[victim].replicas[0]
    reported = with_mms(
        state,
        *(
            replace(m, stored=frozenset({victim}) if m.name == holder else frozenset())
            for m in state.message_managers
        ),
    )
    assert not plan(reported).releases()
    cleaned = with_mms(state, *(replace(m, stored=frozenset()) for m in state.message_managers))
    result, state = step(cleaned)
    assert result.releases() == [
        ReleaseFinalizer(victim, result.releases()[0].reason, result.releases()[0].message)
    ]
    assert victim not in {p.name for p in state.partitions}


def test_active_on_demand_partition_is_never_deleted() -> None:
    state = report_all(boot(n_mms=2, fixed=1), backlog=0, producers=0)
    assert not plan(state).deletes()


def test_new_mm_gets_its_on_demand_partitions() -> None:
    state = boot(n_mms=3, fixed=3, per_mm=2)
    result = plan(with_mms(state, *state.message_managers, MessageManager("mm-3")))
    creates = result.creates()
    assert len(creates) == 2
    assert all(c.status.primary == "mm-3" and c.spec.type == PartitionType.ON_DEMAND for c in creates)
    assert len({c.name for c in creates}) == 2
    assert not result.updates()  # fixed partitions stay where they are


def test_not_ready_mm_gets_nothing_new() -> None:
    state = boot(n_mms=2, fixed=0)
    result = plan(with_mms(state, *state.message_managers, MessageManager("mm-2", ready=False)))
    assert result.changes == ()


def test_pick_and_reassign_producers_balance() -> None:
    def od(
        name: str, primary: str, state: PartitionState = PartitionState.ACTIVE, writes: bool = True
    ) -> PartitionAssignment:
        return PartitionAssignment(
            name=name,
            type=PartitionType.ON_DEMAND,
            state=state,
            primary=primary,
            replicas=(primary,),
            in_sync=(primary,),
            accept_writes=writes,
        )

    table = [
        od("a", "mm-0", PartitionState.DRAINING, writes=False),
        od("b", "mm-1"),
        od("c", "mm-2"),
        PartitionAssignment(name="f", type=PartitionType.FIXED, primary="mm-1", replicas=("mm-1",)),
    ]
    assert pick_on_demand_partition(table, "p", {"b": 3, "c": 1}) == "c"
    assert pick_on_demand_partition(table, "p", live_mms={"mm-1"}) == "b"
    assert pick_on_demand_partition(table, "p", exclude={"b", "c"}) is None
    moves = reassign_producers({f"p{i}": "a" for i in range(4)} | {"q": "b"}, table)
    assert set(moves) == {"p0", "p1", "p2", "p3"}
    totals = Counter(moves.values()) + Counter({"b": 1})
    assert sorted(totals.values()) == [2, 3]  # balanced: 5 producers on 2 writable partitions
    assert pick_on_demand_partition(table, "x") == pick_on_demand_partition(table, "x")


# ---- scale-down -------------------------------------------------------------------------------------


def test_evacuation_moves_everything_off_a_leaving_mm_before_it_goes() -> None:
    state = boot(n_mms=4, fixed=8)
    leaving = tuple(replace(m, leaving=m.name == "mm-3") for m in state.message_managers)
    state = with_mms(state, *leaving)
    had = {n for n, st in statuses(state).items() if "mm-3" in st.replicas}
    assert had
    for _ in range(4):
        result, state = step(report_all(state))
        assert_sane(state)
        if not result.evacuating:
            break
    assert result.safe_to_remove == frozenset({"mm-3"})
    assert any(isinstance(c, MessageManagersEvacuated) and c.names == ("mm-3",) for c in result.changes)
    for name, st in statuses(state).items():
        if "-od-" in name and name in had and st.state != PartitionState.ACTIVE:
            continue
        assert "mm-3" not in st.replicas, name
        if "fixed" in name:
            assert st.state == PartitionState.ACTIVE and len(st.replicas) == 2
    # the leaving MM's own on-demand partition drains instead of moving writes
    drained = [st for n, st in statuses(state).items() if "-od-" in n and st.state != PartitionState.ACTIVE]
    assert drained and all(not st.accept_writes for st in drained)


def test_evacuation_waits_for_the_replacement_to_be_in_sync() -> None:
    state = fixed_state(["mm-0", "mm-1"], ["mm-0", "mm-1"], {})
    state = with_mms(state, *(replace(m, leaving=m.name == "mm-0") for m in state.message_managers))
    result, state = step(state)
    st = statuses(state)["demo-fixed-0"]
    assert st.primary == "mm-1" and st.epoch == 4  # handed over to the in-sync stayer at once
    assert st.replicas == ["mm-1", "mm-0", "mm-2"]  # mm-0 kept until mm-2 is in sync
    assert result.evacuating == frozenset({"mm-0"}) and not result.safe_to_remove
    assert plan(state).changes == ()  # level-based: nothing new until mm-2 catches up
    result, state = step(report_all(state))
    st = statuses(state)["demo-fixed-0"]
    assert st.replicas == ["mm-1", "mm-2"] and st.in_sync == ["mm-1", "mm-2"]
    assert result.safe_to_remove == frozenset({"mm-0"})


def test_trim_when_replicas_shrink() -> None:
    state = fixed_state(["mm-0", "mm-1", "mm-2"], ["mm-0", "mm-2"], {})
    (info,) = state.partitions
    smaller = replace(info, spec=info.spec.model_copy(update={"replicas": 2}))
    # A copy catching up is kept until it is in sync (it may be a balancing move's new copy).
    assert not [
        u for u in plan(replace(state, partitions=(smaller,))).updates() if len(u.status.replicas) < 3
    ]
    caught_up = replace(
        smaller, status=smaller.status.model_copy(update={"in_sync": ["mm-0", "mm-1", "mm-2"]})
    )
    (upd,) = plan(replace(state, partitions=(caught_up,))).updates()
    assert upd.status.replicas == ["mm-0", "mm-1"]  # then the lowest ranked backup goes


# ---- broker-only local controller -------------------------------------------------------------------


def test_plan_assignments_for_the_local_controller() -> None:
    first = plan_assignments([], ["mm-0", "mm-1", "mm-2"], spec=spec(fixed=3), now=NOW)
    table = first.assignments
    assert len(table) == 6
    assert all(a.writable and len(a.replicas) == 2 for a in table)
    again = plan_assignments(table, ["mm-0", "mm-1", "mm-2"], spec=spec(fixed=3), now=NOW)
    assert again.assignments == table and again.plan.changes == ()
    lost = plan_assignments(table, ["mm-1", "mm-2"], spec=spec(fixed=3), now=NOW)
    for a in lost.assignments:
        assert "mm-0" not in a.replicas
        before = next(b for b in table if b.name == a.name)
        if before.primary == "mm-0":
            assert a.epoch == before.epoch + 1
            if a.type == PartitionType.FIXED:
                assert a.writable
            else:
                assert a.state == PartitionState.DRAINING and not a.writable
    # A drained on-demand partition disappears from the table.
    draining = [a for a in lost.assignments if a.state == PartitionState.DRAINING]
    reports = {a.name: ReplicaReport(a.primary or "", a.epoch, a.in_sync) for a in draining}
    done = plan_assignments(lost.assignments, ["mm-1", "mm-2"], spec=spec(fixed=3), reports=reports, now=NOW)
    assert not {a.name for a in draining} & {a.name for a in done.assignments}


# ---- restarts and helpers ---------------------------------------------------------------------------


def test_operator_restart_mid_failover_finishes_it_without_double_bumps() -> None:
    """Only part of a failover plan was applied before the operator died: planning again from the
    resources finishes the rest and leaves what was applied alone."""
    state = boot(n_mms=3, fixed=12)
    lost = lose(state, "mm-0")
    full = plan(lost)
    updates = full.updates()
    assert len(updates) > 4
    half = apply_changes(lost, updates[: len(updates) // 2])
    resumed = plan(half)
    done = {u.name for u in updates[: len(updates) // 2]}
    resumed_names = {u.name for u in resumed.updates()}
    assert resumed_names == {u.name for u in updates} - done
    expected = {u.name: u.status for u in updates}
    for u in resumed.updates():
        assert u.status.primary == expected[u.name].primary
        assert u.status.epoch == expected[u.name].epoch
    final = apply_changes(half, resumed.changes)
    assert plan(final).changes == ()
    assert_sane(final)


def test_promote_refuses_an_out_of_sync_replica() -> None:
    status = PartitionStatus(primary="mm-0", replicas=["mm-0", "mm-1"], in_sync=["mm-0"], state="Active")
    draft = Draft.from_info(PartitionInfo("p", PartitionSpec(cluster="c", type="fixed"), status))
    with pytest.raises(ValueError, match="not in sync"):
        draft.promote("mm-1")


def test_names_sort_naturally_and_on_demand_names_are_unique() -> None:
    assert sorted(["mm-10", "mm-2", "mm-1"], key=natural_key) == ["mm-1", "mm-2", "mm-10"]
    names = {ondemand_name("demo", ms, i) for ms in (1, 2, 10**12) for i in range(3)}
    assert len(names) == 9 and all(n.startswith("demo-od-") for n in names)
