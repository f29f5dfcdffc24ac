"""Quiet rounds: which rounds the reconcile daemon may skip on a cluster at rest."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from hybridmq.planner.roll import RollDecision
from hybridmq.planner.state import MessageManager
from hybridmq_operator.quiet import Inputs, QuietRounds, roll_idle, settled

NOW = datetime(2026, 11, 27, 12, 0, 0, tzinfo=UTC)


def _lease(name: str, renewed: datetime, report: str = "r1", duration: int = 10) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": str(int(renewed.timestamp())),
            "annotations": {"hybridmq.io/report": report},
        },
        "spec": {
            "holderIdentity": name,
            "leaseDurationSeconds": duration,
            "renewTime": renewed.isoformat(),
        },
    }


def _world() -> dict[str, Any]:
    return {
        "cluster": {"metadata": {"name": "c", "resourceVersion": "7"}},
        "pods": tuple({"metadata": {"name": f"c-mm-{i}"}} for i in range(3)),
        "leases": [_lease(f"c-mm-{i}", NOW) for i in range(3)],
        "partitions": tuple({"metadata": {"name": f"p-{i}"}, "status": {"epoch": 1}} for i in range(5)),
        "sets": ({"metadata": {"name": "c-mm"}},),
    }


def _inputs(w: dict[str, Any]) -> Inputs:
    return Inputs.of(w["cluster"], w["pods"], w["leases"], w["partitions"], w["sets"])


def _settled(w: dict[str, Any], at: float = 100.0) -> QuietRounds:
    q = QuietRounds(max_quiet_s=2.0)
    q.full_round(_inputs(w), settled=True, monotonic=at)
    return q


def test_a_round_that_would_read_the_same_on_a_settled_cluster_is_skipped() -> None:
    w = _world()
    q = _settled(w)
    assert q.skip(_inputs(w), 100.25, NOW + timedelta(seconds=0.25))
    assert q.skipped == 1


def test_lease_renewals_alone_are_no_change_but_a_new_report_is() -> None:
    w = _world()
    q = _settled(w)
    renewed = NOW + timedelta(seconds=1)
    w["leases"] = [_lease(f"c-mm-{i}", renewed) for i in range(3)]
    assert q.skip(_inputs(w), 101.0, renewed)
    w["leases"][1] = _lease("c-mm-1", renewed, report="r2")
    assert not q.skip(_inputs(w), 101.0, renewed)


def test_any_new_copy_of_a_partition_pod_or_statefulset_is_a_change_even_if_equal() -> None:
    """The indexes keep a new copy per watch event: identity, not equality, says "unchanged"."""
    for kind in ("partitions", "pods", "sets"):
        w = _world()
        q = _settled(w)
        items = list(w[kind])
        items[0] = copy.deepcopy(items[0])
        w[kind] = tuple(items)
        assert not q.skip(_inputs(w), 100.5, NOW), kind


def test_a_partition_gone_from_the_index_is_a_change() -> None:
    w = _world()
    q = _settled(w)
    w["partitions"] = w["partitions"][:-1]
    assert not q.skip(_inputs(w), 100.5, NOW)


def test_a_changed_broker_cluster_is_a_change() -> None:
    w = _world()
    q = _settled(w)
    w["cluster"] = {"metadata": {"name": "c", "resourceVersion": "8"}}
    assert not q.skip(_inputs(w), 100.5, NOW)


def test_a_round_that_could_see_a_lease_run_out_is_never_skipped() -> None:
    """An MM that stopped renewing must be seen as lost as fast as without quiet rounds: the MM
    is lost once its Lease has run out, so from then on no round is skipped."""
    w = _world()
    q = _settled(w)
    # Renewed at NOW with a 10 s lease.
    assert q.skip(_inputs(w), 100.5, NOW + timedelta(seconds=9.9))
    assert not q.skip(_inputs(w), 100.6, NOW + timedelta(seconds=10.0))
    assert not q.skip(_inputs(w), 100.7, NOW + timedelta(seconds=12.0))


def test_an_unsettled_round_or_a_failed_one_is_followed_by_a_full_round() -> None:
    w = _world()
    q = QuietRounds(max_quiet_s=2.0)
    assert not q.skip(_inputs(w), 100.0, NOW)  # nothing ran yet
    q.full_round(_inputs(w), settled=False, monotonic=100.0)
    assert not q.skip(_inputs(w), 100.25, NOW)
    q.full_round(_inputs(w), settled=True, monotonic=100.5)
    q.reset()
    assert not q.skip(_inputs(w), 100.75, NOW)


def test_a_full_round_runs_at_least_every_max_quiet_seconds() -> None:
    w = _world()
    q = _settled(w, at=100.0)
    assert q.skip(_inputs(w), 101.9, NOW)
    assert not q.skip(_inputs(w), 102.0, NOW)


def test_a_busy_or_unsettled_cluster_is_polled_every_interval() -> None:
    w = _world()
    q = QuietRounds(max_quiet_s=10.0)
    assert q.sleep_for(100.0, NOW, 0.25) == 0.25  # nothing ran yet
    q.full_round(_inputs(w), settled=False, monotonic=100.0)
    assert q.sleep_for(100.0, NOW, 0.25) == 0.25


def test_a_settled_cluster_sleeps_until_just_after_its_earliest_lease_ends() -> None:
    w = _world()
    w["leases"][2] = _lease("c-mm-2", NOW - timedelta(seconds=3))  # the earliest: ends at NOW + 7
    q = QuietRounds(max_quiet_s=60.0)
    q.full_round(_inputs(w), settled=True, monotonic=100.0)
    slept = q.sleep_for(100.0, NOW, 0.25)
    assert 7.0 <= slept <= 7.1
    # Woken then, with that Lease not renewed, the round runs in full and its MM is already lost
    # by then (the Lease is over): the failover starts in that very round.
    woken = NOW + timedelta(seconds=slept)
    assert woken > NOW + timedelta(seconds=7)
    assert not q.skip(_inputs(w), 100.0 + slept, woken)
    # A timer that fires a little early finds the same.
    assert not q.skip(_inputs(w), 100.0 + slept - 0.04, woken - timedelta(seconds=0.04))


def test_after_a_takeover_a_settled_cluster_sleeps_until_the_leases_graced_end() -> None:
    """A standby that took over at NOW saw Leases of 1 s renewed 1.14 s before (listed late): the
    rounds count them as ending one duration after NOW (``observe.lease_expiry``), so the daemon
    sleeps until then instead of waking every interval for rounds that find nothing lost."""
    w = _world()
    w["leases"] = [_lease(f"c-mm-{i}", NOW - timedelta(seconds=1.14), duration=1) for i in range(3)]
    q = QuietRounds(max_quiet_s=60.0)
    q.full_round(
        Inputs.of(w["cluster"], w["pods"], w["leases"], w["partitions"], w["sets"], NOW), True, 100.0
    )
    assert 1.0 <= q.sleep_for(100.0, NOW, 0.05) <= 1.1
    without_grace = QuietRounds(max_quiet_s=60.0)
    without_grace.full_round(_inputs(w), settled=True, monotonic=100.0)
    assert without_grace.sleep_for(100.0, NOW, 0.05) == 0.05  # what the rounds did before


def test_a_settled_cluster_sleeps_no_longer_than_the_safety_bound() -> None:
    w = _world()
    w["leases"] = [_lease(f"c-mm-{i}", NOW, duration=3600) for i in range(3)]
    q = QuietRounds(max_quiet_s=10.0)
    q.full_round(_inputs(w), settled=True, monotonic=100.0)
    assert q.sleep_for(100.0, NOW, 0.25) == pytest.approx(10.0)
    assert q.sleep_for(104.0, NOW + timedelta(seconds=4), 0.25) == pytest.approx(6.0)
    assert not q.skip(_inputs(w), 110.0, NOW + timedelta(seconds=10))  # the bound


def test_renewals_seen_by_a_skipped_round_push_the_next_wake_up_back() -> None:
    w = _world()
    q = QuietRounds(max_quiet_s=60.0)
    q.full_round(_inputs(w), settled=True, monotonic=100.0)
    first = q.sleep_for(100.0, NOW, 0.25)
    renewed = NOW + timedelta(seconds=first)
    w["leases"] = [_lease(f"c-mm-{i}", renewed) for i in range(3)]
    assert q.skip(_inputs(w), 100.0 + first, renewed)
    assert 10.0 <= q.sleep_for(100.0 + first, renewed, 0.25) <= 10.1


def test_a_lease_already_near_its_end_is_polled_every_interval() -> None:
    w = _world()
    q = _settled(w)
    assert q.sleep_for(100.0, NOW + timedelta(seconds=9.9), 0.25) == 0.25


def _settled_round(**changed: Any) -> bool:
    """A round that left nothing in flight, with the given conditions changed."""
    conditions: dict[str, Any] = {
        "changes_planned": False,
        "applied": True,
        "waiting_for_mms": False,
        "scale_down_blocked": False,
        "roll_is_idle": True,
        "unwatched_writes": False,
        "follow_ups": False,
        "planned": True,
        "retention_pending": False,
        "mms": [MessageManager(name=f"c-mm-{i}") for i in range(3)],
    }
    return settled(**{**conditions, **changed})


def test_a_round_that_left_nothing_in_flight_is_settled() -> None:
    assert _settled_round()


@pytest.mark.parametrize(
    "condition",
    [
        {"changes_planned": True},
        {"applied": False},
        {"waiting_for_mms": True},
        {"scale_down_blocked": True},
        {"roll_is_idle": False},
        {"unwatched_writes": True},
        {"follow_ups": True},
        {"planned": False},
        {"retention_pending": True},
    ],
    ids=lambda c: next(iter(c)),
)
def test_anything_in_flight_keeps_the_next_round_full(condition: dict[str, Any]) -> None:
    assert not _settled_round(**condition)


@pytest.mark.parametrize(
    "mm",
    [
        MessageManager(name="c-mm-2", alive=False),
        MessageManager(name="c-mm-2", ready=False),
        MessageManager(name="c-mm-2", accounted=False),
        MessageManager(name="c-mm-2", stopping=True),
    ],
    ids=["lost", "not-ready", "not-accounted", "stopping"],
)
def test_an_mm_that_is_not_plainly_up_keeps_the_next_round_full(mm: MessageManager) -> None:
    mms = [MessageManager(name="c-mm-0"), MessageManager(name="c-mm-1"), mm]
    assert not _settled_round(mms=mms)


def _decision(**fields: Any) -> RollDecision:
    return RollDecision(**{"rolling": False, "reason": "Updated", "message": "", **fields})


def test_a_roll_is_idle_only_when_nothing_is_to_be_done() -> None:
    assert roll_idle(None, watched=False)  # no StatefulSets watched: there is no roll
    assert roll_idle(_decision(), watched=True)
    assert not roll_idle(None, watched=True)  # a revision not known yet
    assert not roll_idle(_decision(rolling=True), watched=True)
    for step in ("mark", "unmark", "delete"):
        assert not roll_idle(_decision(**{step: "c-mm-1"}), watched=True)
