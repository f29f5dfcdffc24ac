"""The BrokerCluster's failover history (``status.failovers``): pure, from one round's records."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hybridmq.api.resources import MAX_FAILOVER_HISTORY, FailoverRecord, PartitionStatus
from hybridmq_operator import failover_history

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def rec(frm: str, to: str | None, reason: str, duration: float, at: datetime = NOW) -> FailoverRecord:
    return FailoverRecord(from_=frm, to=to, reason=reason, duration_seconds=duration, time=at)


def test_one_entry_per_lost_mm_with_detection_completion_and_duration() -> None:
    records = [
        ("c-fixed-0", rec("c-mm-0", "c-mm-1", "pod deleted", 0.4)),
        ("c-fixed-1", rec("c-mm-0", "c-mm-2", "pod deleted", 0.4)),
    ]
    history = failover_history.record_round([], records, NOW, led={"c-mm-0": 0})
    assert history == [
        {
            "kind": "failover",
            "lost": "c-mm-0",
            "reason": "pod deleted",
            "detectedAt": "2026-01-01T11:59:59.600000Z",
            "completedAt": "2026-01-01T12:00:00Z",
            "durationSeconds": 0.4,
            "partitions": 2,
            "offline": 0,
        }
    ]
    assert failover_history.last_duration(history) == 0.4


def test_a_failover_over_two_rounds_completes_in_the_second() -> None:
    first = failover_history.record_round(
        [], [("p0", rec("mm-0", "mm-1", "lease expired", 1.0))], NOW, led={"mm-0": 1}
    )
    assert "durationSeconds" not in first[0] and first[0]["partitions"] == 1
    later = NOW + timedelta(seconds=0.25)
    second = failover_history.record_round(
        first, [("p1", rec("mm-0", "mm-2", "lease expired", 1.25, later))], later, led={"mm-0": 0}
    )
    assert len(second) == 1 and second[0]["partitions"] == 2
    assert second[0]["durationSeconds"] == 1.25
    assert [e.lost for e in failover_history.completed_in(first, second)] == ["mm-0"]
    assert failover_history.completed_in(second, second) == []


def test_a_completed_failover_that_a_later_round_extends_is_counted_once() -> None:
    """A record of the same loss in a later round (a partition whose failover came a round later,
    its detection computed a little earlier) moves the entry's detection time; the metrics count the
    failover once all the same (seen counted twice under load)."""
    first = failover_history.record_round(
        [], [("p0", rec("mm-0", "mm-1", "pod deleted", 0.4))], NOW, led={"mm-0": 0}
    )
    assert [e.lost for e in failover_history.completed_in([], first)] == ["mm-0"]
    later = NOW + timedelta(seconds=0.5)
    second = failover_history.record_round(
        first, [("od-0", rec("mm-0", "mm-2", "pod deleted", 1.2, later))], later, led={"mm-0": 0}
    )
    assert len(second) == 1 and second[0]["partitions"] == 2
    assert second[0]["detectedAt"] != first[0]["detectedAt"]  # 0.3 s earlier
    assert failover_history.completed_in(first, second) == []


def test_offline_partitions_leave_the_entry_incomplete() -> None:
    history = failover_history.record_round(
        [], [("p0", rec("mm-0", None, "pod deleted", 0.3))], NOW, led={"mm-0": 0}
    )
    assert history[0]["offline"] == 1 and "completedAt" not in history[0]
    assert failover_history.last_duration(history) is None


def test_handoffs_count_from_the_stop_request_and_the_list_is_bounded() -> None:
    asked = NOW - timedelta(seconds=0.15)
    history = failover_history.record_round(
        [],
        [("p0", rec("mm-1", "mm-2", "graceful handoff: mm-1 is stopping", 0.0))],
        NOW,
        stopping_since={"mm-1": asked},
        led={"mm-1": 0},
    )
    assert history[0]["kind"] == "handoff" and history[0]["durationSeconds"] == 0.15
    for i in range(2 * MAX_FAILOVER_HISTORY):
        at = NOW + timedelta(minutes=i + 1)
        history = failover_history.record_round(
            history, [("p0", rec(f"mm-{i}", "mm-x", "pod deleted", 0.5, at))], at, led={}
        )
    assert len(history) == MAX_FAILOVER_HISTORY
    assert history[0]["lost"] == f"mm-{2 * MAX_FAILOVER_HISTORY - 1}"  # newest first


def test_a_failover_that_left_a_partition_offline_completes_when_it_has_a_primary_again() -> None:
    """Seen on a loaded machine: a backup's lease lapsed, then the primary's pod was deleted, so one
    of its partitions had no in-sync copy alive. Its entry stayed without a completion for ever."""
    before = [
        PartitionStatus(primary="mm-0", replicas=["mm-0", "mm-1"], in_sync=["mm-0", "mm-1"]),
        PartitionStatus(primary="mm-0", replicas=["mm-0", "mm-2"], in_sync=["mm-0", "mm-2"]),
        PartitionStatus(primary="mm-1", replicas=["mm-1", "mm-2"], in_sync=["mm-1", "mm-2"]),
    ]
    first_records = [
        ("p0", rec("mm-0", "mm-1", "pod deleted", 0.4)),
        ("p1", rec("mm-0", None, "pod deleted", 0.4)),  # mm-2, its only other in-sync copy, is lost
    ]
    led = failover_history.still_led(before, first_records)
    assert led["mm-0"] == 0
    first = failover_history.record_round([], first_records, NOW, led=led)
    assert first[0]["offline"] == 1 and "durationSeconds" not in first[0]

    # Rounds later p1 is still offline: it counts against mm-0, whose failover is not complete.
    offline = PartitionStatus(
        primary=None,
        replicas=["mm-0", "mm-2"],
        in_sync=["mm-0", "mm-2"],
        last_failover=first_records[1][1],
    )
    moved = PartitionStatus(primary="mm-1", replicas=["mm-1"], in_sync=["mm-1"])
    assert failover_history.still_led([moved, offline, before[2]], [])["mm-0"] == 1

    # mm-2 is back 20 s later and takes p1: the planner records it as the end of mm-0's failover.
    later = NOW + timedelta(seconds=20)
    back = [("p1", rec("mm-0", "mm-2", "pod deleted", 20.4, later))]
    led = failover_history.still_led([moved, offline, before[2]], back)
    assert led["mm-0"] == 0
    second = failover_history.record_round(first, back, later, led=led)
    assert len(second) == 1
    assert second[0]["durationSeconds"] == 20.4 and second[0]["partitions"] == 2
    assert second[0]["offline"] == 1  # it did go offline for a while
    assert [e.lost for e in failover_history.completed_in(first, second)] == ["mm-0"]
