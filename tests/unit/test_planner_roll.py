"""The roll planner: which pod goes next, whether it may go now and why not (no Kubernetes)."""

from __future__ import annotations

from dataclasses import replace

from hybridmq.planner.roll import (
    DONE,
    MOVING_REPLICAS,
    RESTARTING,
    UNMARKING,
    WAITING_FOR_IN_SYNC,
    WAITING_FOR_READY,
    WAITING_FOR_STATEFULSET,
    RoleTarget,
    RollDecision,
    RollInput,
    RollPartition,
    RollPod,
    plan_roll,
    settle_restart,
)

OLD, NEW = "rev-old", "rev-new"


def _pods(role: str, n: int, revision: str = OLD) -> list[RollPod]:
    return [RollPod(f"c-{role}-{i}", role, revision, ready=True) for i in range(n)]


def _spread(n_mms: int, count: int = 3) -> list[RollPartition]:
    """``count`` partitions, each with two in-sync replicas on neighbouring MMs."""
    pairs = [(f"c-mm-{i % n_mms}", f"c-mm-{(i + 1) % n_mms}") for i in range(count)]
    return [RollPartition(f"p{i}", pair, pair) for i, pair in enumerate(pairs)]


def _inp(
    mms: list[RollPod], cms: list[RollPod], parts: list[RollPartition], mm_rev: str | None = NEW
) -> RollInput:
    return RollInput(
        targets={"mm": RoleTarget(3, mm_rev), "cm": RoleTarget(len(cms), NEW)},
        pods=[*mms, *cms],
        partitions=parts,
    )


def test_everything_at_the_new_revision_is_done() -> None:
    d = plan_roll(_inp(_pods("mm", 3, NEW), _pods("cm", 2, NEW), _spread(3)))
    assert (d.rolling, d.reason, d.mark, d.delete) == (False, DONE, None, None)
    assert d.updated == {"mm": (3, 3), "cm": (2, 2)}


def test_an_unobserved_statefulset_decides_nothing() -> None:
    d = plan_roll(_inp(_pods("mm", 3), _pods("cm", 1), _spread(3), mm_rev=None))
    assert not d.known and d.reason == WAITING_FOR_STATEFULSET and d.mark is None and d.delete is None


def test_the_highest_outdated_mm_is_marked_first_and_its_replicas_move_before_the_delete() -> None:
    mms, parts = _pods("mm", 3), _spread(3)
    d = plan_roll(_inp(mms, _pods("cm", 1), parts))
    assert (d.reason, d.mark, d.delete) == (MOVING_REPLICAS, "c-mm-2", None)
    assert "p1" in d.message and "p2" in d.message
    # Marked and still named by a partition: keep waiting, delete nothing.
    marked = [*mms[:2], replace(mms[2], marked=True)]
    d = plan_roll(_inp(marked, _pods("cm", 1), parts))
    assert (d.reason, d.mark, d.delete, d.pod) == (MOVING_REPLICAS, None, None, "c-mm-2")
    # No partition names it any more: now the pod goes.
    moved = [RollPartition(p.name, ("c-mm-0", "c-mm-1"), ("c-mm-0", "c-mm-1")) for p in parts]
    d = plan_roll(_inp(marked, _pods("cm", 1), moved))
    assert (d.reason, d.delete) == (RESTARTING, "c-mm-2")


def test_an_emptied_mm_waits_for_the_others_to_be_ready_and_in_sync_before_its_restart() -> None:
    """The MMs that took its replicas may still be catching up: deleting it then would make two
    MMs unavailable at once."""
    emptied = [RollPartition(f"p{i}", ("c-mm-0", "c-mm-1"), ("c-mm-0", "c-mm-1")) for i in range(3)]
    catching_up = [RollPod("c-mm-0", "mm", OLD, ready=True), RollPod("c-mm-1", "mm", NEW, ready=False)]
    mms = [*catching_up, RollPod("c-mm-2", "mm", OLD, ready=True, marked=True)]
    d = plan_roll(_inp(mms, _pods("cm", 1), emptied))
    assert (d.reason, d.delete, d.mark) == (WAITING_FOR_READY, None, None) and "c-mm-1" in d.message
    ready = [*mms[:1], replace(mms[1], ready=True), mms[2]]
    behind = [*emptied[:2], RollPartition("p2", ("c-mm-0", "c-mm-1"), ("c-mm-0",))]
    d = plan_roll(_inp(ready, _pods("cm", 1), behind))
    assert (d.reason, d.delete) == (WAITING_FOR_IN_SYNC, None) and "p2" in d.message
    d = plan_roll(_inp(ready, _pods("cm", 1), emptied))
    assert (d.reason, d.delete) == (RESTARTING, "c-mm-2")


def test_a_second_mm_is_never_touched_while_one_is_down() -> None:
    mms = [*_pods("mm", 2), RollPod("c-mm-2", "mm", NEW, ready=False)]
    d = plan_roll(_inp(mms, _pods("cm", 1), _spread(3)))
    assert (d.reason, d.mark, d.delete) == (WAITING_FOR_READY, None, None)
    assert "c-mm-2" in d.message and "1/3 MMs" in d.message
    deleting = [*_pods("mm", 2), RollPod("c-mm-2", "mm", OLD, ready=True, deleting=True)]
    d = plan_roll(_inp(deleting, _pods("cm", 1), _spread(3)))
    assert (d.reason, d.mark, d.delete) == (WAITING_FOR_READY, None, None)
    missing = _pods("mm", 2)
    d = plan_roll(_inp(missing, _pods("cm", 1), _spread(2)))
    assert (d.reason, d.mark, d.delete) == (WAITING_FOR_READY, None, None)
    assert "not created" in d.message


def test_the_mm_holding_a_lagging_copy_goes_first_its_restart_takes_no_in_sync_copy() -> None:
    mms = [*_pods("mm", 2), RollPod("c-mm-2", "mm", NEW, ready=True)]
    parts = _spread(3)
    parts[0] = RollPartition("p0", ("c-mm-0", "c-mm-1"), ("c-mm-0",))
    d = plan_roll(_inp(mms, _pods("cm", 1), parts))
    assert (d.rolling, d.reason, d.mark, d.delete) == (True, MOVING_REPLICAS, "c-mm-1", None)


def test_the_roll_waits_when_every_outdated_mm_holds_a_partition_at_its_min_in_sync() -> None:
    """The last MM to roll is the only in-sync copy of p0 (its backup behind): it stays, and the
    reason names p0 and where its copy lags; once p0 is in sync again the MM goes."""
    mms = [RollPod("c-mm-0", "mm", OLD, ready=True), *(RollPod(f"c-mm-{i}", "mm", NEW, True) for i in (1, 2))]
    parts = _spread(3)
    parts[0] = RollPartition("p0", ("c-mm-0", "c-mm-1"), ("c-mm-0",))
    d = plan_roll(_inp(mms, _pods("cm", 1), parts))
    assert (d.rolling, d.reason, d.mark, d.delete) == (True, WAITING_FOR_IN_SYNC, None, None)
    assert "p0" in d.message and "c-mm-1" in d.message and "c-mm-0" in d.message
    assert "p1" not in d.message and "p2" not in d.message
    d = plan_roll(_inp(mms, _pods("cm", 1), _spread(3)))
    assert (d.reason, d.mark) == (MOVING_REPLICAS, "c-mm-0")


def test_min_in_sync_is_counted_per_partition_and_capped_at_the_other_replicas() -> None:
    three = ("c-mm-0", "c-mm-1", "c-mm-2")
    mms = [*_pods("mm", 3)]
    # 3 copies, minInSync 2, c-mm-2 behind: c-mm-0 and c-mm-1 are needed, c-mm-2 may go.
    behind = [RollPartition("p0", three, three[:2], min_in_sync=2)]
    assert plan_roll(_inp(mms, _pods("cm", 1), behind)).mark == "c-mm-2"
    only_mm0 = [
        RollPod("c-mm-0", "mm", OLD, ready=True),
        *(RollPod(f"c-mm-{i}", "mm", NEW, True) for i in (1, 2)),
    ]
    d = plan_roll(_inp(only_mm0, _pods("cm", 1), behind))
    assert (d.reason, d.mark, d.delete) == (WAITING_FOR_IN_SYNC, None, None) and "p0" in d.message
    # 2 copies, minInSync 2, both in sync: the copy moves off first, so the roll goes on.
    full = [RollPartition("p0", three[:2], three[:2], min_in_sync=2)]
    assert plan_roll(_inp(only_mm0, _pods("cm", 1), full)).mark == "c-mm-0"


def test_a_marked_mm_current_again_after_a_revert_is_unmarked_not_restarted() -> None:
    mms = [*_pods("mm", 2, NEW), RollPod("c-mm-2", "mm", NEW, ready=True, marked=True)]
    moved = [RollPartition("p0", ("c-mm-0", "c-mm-1"), ("c-mm-0", "c-mm-1"))]
    d = plan_roll(_inp(mms, _pods("cm", 1, NEW), moved))
    assert (d.unmark, d.delete, d.mark, d.rolling) == ("c-mm-2", None, None, False)
    assert d.reason == UNMARKING
    unmarked = [*mms[:2], replace(mms[2], marked=False)]
    assert plan_roll(_inp(unmarked, _pods("cm", 1, NEW), moved)).reason == DONE


def test_out_of_sync_wins_over_not_ready_in_the_reason() -> None:
    mms = [*_pods("mm", 2), RollPod("c-mm-2", "mm", NEW, ready=False)]
    parts = _spread(3)
    parts[1] = RollPartition("p1", ("c-mm-1", "c-mm-2"), ("c-mm-1",))
    d = plan_roll(_inp(mms, _pods("cm", 1), parts))
    assert (d.reason, d.delete, d.mark) == (WAITING_FOR_IN_SYNC, None, None)
    assert "p1" in d.message and "c-mm-2" in d.message


def test_an_outdated_mm_down_on_the_old_spec_is_replaced_unless_a_partition_needs_its_copy() -> None:
    mms = [*_pods("mm", 2), RollPod("c-mm-2", "mm", OLD, ready=False)]
    parts = [RollPartition("p0", ("c-mm-0", "c-mm-1"), ("c-mm-0", "c-mm-1"))]
    d = plan_roll(_inp(mms, _pods("cm", 1), parts))
    assert (d.reason, d.delete) == (RESTARTING, "c-mm-2")
    # One of two in-sync copies: the other keeps p0 at its minInSync, so it goes too.
    parts = [RollPartition("p0", ("c-mm-0", "c-mm-2"), ("c-mm-0", "c-mm-2"))]
    assert plan_roll(_inp(mms, _pods("cm", 1), parts)).delete == "c-mm-2"
    # The only in-sync copy: wait instead, the copy would go with it.
    parts = [RollPartition("p0", ("c-mm-0", "c-mm-2"), ("c-mm-2",))]
    d = plan_roll(_inp(mms, _pods("cm", 1), parts))
    assert (d.reason, d.delete) == (WAITING_FOR_IN_SYNC, None) and "p0" in d.message


def test_an_mm_that_holds_nothing_or_is_alone_is_restarted_directly() -> None:
    d = plan_roll(_inp(_pods("mm", 3), _pods("cm", 1), []))
    assert (d.reason, d.delete, d.mark) == (RESTARTING, "c-mm-2", None)
    one = RollInput(
        targets={"mm": RoleTarget(1, NEW), "cm": RoleTarget(1, NEW)},
        pods=[*_pods("mm", 1), *_pods("cm", 1, NEW)],
        partitions=[RollPartition("p0", ("c-mm-0",), ("c-mm-0",))],
    )
    assert plan_roll(one).delete == "c-mm-0"


def test_cms_roll_after_the_mms_one_at_a_time() -> None:
    cms = _pods("cm", 3)
    d = plan_roll(_inp(_pods("mm", 3), cms, _spread(3)))
    assert d.mark == "c-mm-2" and d.delete is None  # MMs first
    d = plan_roll(_inp(_pods("mm", 3, NEW), cms, _spread(3)))
    assert (d.reason, d.delete) == (RESTARTING, "c-cm-2")
    down = [*cms[:2], RollPod("c-cm-2", "cm", NEW, ready=False)]
    d = plan_roll(_inp(_pods("mm", 3, NEW), down, _spread(3)))
    assert (d.reason, d.delete) == (WAITING_FOR_READY, None)
    assert d.updated["cm"] == (1, 3)
    # The last new MM not Ready yet: the CMs wait for it.
    mms = [*_pods("mm", 2, NEW), RollPod("c-mm-2", "mm", NEW, ready=False)]
    d = plan_roll(_inp(mms, cms, _spread(3)))
    assert (d.reason, d.delete, d.mark) == (WAITING_FOR_READY, None, None) and "c-mm-2" in d.message


def test_mms_being_scaled_away_are_not_rolled() -> None:
    mms = [*_pods("mm", 3, NEW), RollPod("c-mm-3", "mm", OLD, ready=True)]
    d = plan_roll(_inp(mms, _pods("cm", 1, NEW), _spread(3)))
    assert (d.rolling, d.reason) == (False, DONE)


def test_a_simulated_roll_never_has_two_mms_down_and_ends_done() -> None:
    """Drive the planner like the operator would (a pod comes back Ready a round after its
    deletion, empty; replicas move off a marked MM one round after the mark) and check the
    invariants on every step."""
    mms = {f"c-mm-{i}": RollPod(f"c-mm-{i}", "mm", OLD, ready=True) for i in range(3)}
    parts = {p.name: p for p in _spread(3, count=6)}
    restarted: list[str] = []
    for _ in range(50):
        d = plan_roll(RollInput({"mm": RoleTarget(3, NEW)}, list(mms.values()), list(parts.values())))
        assert sum(1 for p in mms.values() if not p.ready or p.deleting) <= 1
        if not d.rolling:
            break
        if d.mark:
            assert all(p.ready for p in mms.values()) and not any(p.out_of_sync for p in parts.values())
            mms[d.mark] = replace(mms[d.mark], marked=True)
        elif d.delete:
            assert not any(d.delete in p.replicas for p in parts.values())
            mms[d.delete] = replace(mms[d.delete], deleting=True, ready=False)
            restarted.append(d.delete)
        for name, pod in list(mms.items()):
            if pod.deleting:
                mms[name] = RollPod(name, "mm", NEW, ready=True)
            elif pod.marked:
                others = [m for m in mms if m != name and not mms[m].deleting]
                for p in list(parts.values()):
                    if name in p.replicas:
                        keep = [r for r in p.replicas if r != name]
                        extra = next(m for m in others if m not in keep)
                        parts[p.name] = RollPartition(p.name, (*keep, extra), (*keep, extra))
    assert d.reason == DONE
    assert sorted(restarted) == sorted(mms) and len(restarted) == 3


def test_an_mm_restart_waits_until_decided_for_the_settle_time_in_a_row() -> None:
    """The MM restarted before may still read not Ready for a few probes after its copies caught up:
    the next MM's pod is deleted only once the restart was decided for SETTLE_S in a row; a round
    that decides otherwise (the MM before went unready) starts the wait again. CMs go at once."""
    go = RollDecision(True, "Restarting", "restarting mm-1", delete="mm-1", pod="mm-1", role="mm")
    held, since = settle_restart(go, None, now=100.0, settle_s=4.0)
    assert held.delete is None and held.pod == "mm-1" and "settled" in held.message
    held, since = settle_restart(go, since, now=103.9, settle_s=4.0)
    assert held.delete is None
    waiting = RollDecision(True, "WaitingForReady", "waiting for mm-2 to be Ready", pod="mm-1")
    _, since = settle_restart(waiting, since, now=104.0, settle_s=4.0)
    assert since is None
    held, since = settle_restart(go, since, now=105.0, settle_s=4.0)
    assert held.delete is None  # the wait began again at 105
    done, since = settle_restart(go, since, now=109.0, settle_s=4.0)
    assert done.delete == "mm-1" and done == go
    other = RollDecision(True, "Restarting", "restarting mm-0", delete="mm-0", pod="mm-0", role="mm")
    assert settle_restart(other, since, now=109.5, settle_s=4.0)[0].delete is None  # another pod: anew
    cm = RollDecision(True, "Restarting", "restarting cm-1", delete="cm-1", pod="cm-1", role="cm")
    assert settle_restart(cm, None, now=0.0, settle_s=4.0) == (cm, None)
