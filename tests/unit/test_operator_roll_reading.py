"""The roll's reading of the watched bodies: revisions, readiness, marks (no Kubernetes)."""

from __future__ import annotations

from typing import Any

from hybridmq.planner.roll import RollDecision
from hybridmq_operator import observe
from hybridmq_operator.conditions import rolling
from hybridmq_operator.handlers.roll import role_target, roll_pod
from hybridmq_operator.handlers.status import roll_progress


def _pod(name: str, revision: str, ready: bool = True, **annotations: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "labels": {"controller-revision-hash": revision, "hybridmq.io/role": "mm"},
            "annotations": annotations,
        },
        "status": {
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "containerStatuses": [{"state": {"running": {}}}],
        },
    }


def test_a_statefulset_not_yet_observed_has_no_revision_to_trust() -> None:
    sts = {"metadata": {"generation": 4}, "status": {"observedGeneration": 3, "updateRevision": "r-old"}}
    assert role_target(sts, 3).revision is None
    sts["status"]["observedGeneration"] = 4
    assert role_target(sts, 3).revision == "r-old"
    assert role_target(None, 3).revision is None


def test_mms_a_scale_down_evacuates_are_not_rolled_unless_it_is_refused() -> None:
    sts = {"metadata": {"generation": 1}, "spec": {"replicas": 3}, "status": {"observedGeneration": 1}}
    assert role_target(sts, 1).replicas == 1  # the two others are leaving
    assert role_target(sts, 1, keep_all=True).replicas == 3  # refused: they stay, they are rolled
    assert role_target(sts, 5).replicas == 3  # growing: the StatefulSet has what it has


def test_pods_are_read_with_revision_readiness_and_the_roll_mark() -> None:
    pod = roll_pod("c-mm-1", "mm", _pod("c-mm-1", "r1", **{"hybridmq.io/roll": "moving-replicas"}))
    assert (pod.revision, pod.ready, pod.marked, pod.deleting) == ("r1", True, True, False)
    unready = roll_pod("c-mm-2", "mm", _pod("c-mm-2", "r1", ready=False))
    assert not unready.ready and not unready.marked


def test_a_marked_mm_counts_as_stopping_for_the_partition_planner() -> None:
    from datetime import UTC, datetime

    pod = _pod("c-mm-1", "r1", **{"hybridmq.io/roll": "moving-replicas"})
    mm = observe.observe_mm("c-mm-1", pod, None, datetime.now(UTC), leaving=False, roll_marked=True)
    assert mm.alive and mm.stopping
    assert observe.marked_for_roll(pod) and not observe.marked_for_roll(_pod("c-mm-0", "r1"))


def test_the_condition_and_progress_come_from_the_decision_or_stay() -> None:
    d = RollDecision(
        True, "WaitingForInSync", "partitions not in sync: p0", pod="c-mm-1", updated={"mm": (1, 3)}
    )
    cond = rolling.from_decision(d, None)
    assert cond is not None and (cond.status, cond.reason) == (True, "WaitingForInSync")
    kept = rolling.from_decision(
        None, [{"type": "Rolling", "status": "False", "reason": "Done", "message": "m"}]
    )
    assert kept is not None and (kept.status, kept.reason, kept.message) == (False, "Done", "m")
    assert rolling.from_decision(None, []) is None
    assert roll_progress(d) == {
        "pod": "c-mm-1",
        "messageManagersUpdated": 1,
        "messageManagers": 3,
        "connectionManagersUpdated": 0,
        "connectionManagers": 0,
    }
