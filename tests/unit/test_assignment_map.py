"""The assignment map: its encoding, the planner's commit decisions, and a broker following it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hybridmq.api.assignment_map import AssignmentMapError, MapEntry, ahead, decode, encode
from hybridmq.api.resources import PartitionStatus
from hybridmq.broker.kube_source import MAP, PARTITIONS, KubeAssignmentSource
from hybridmq.planner import Plan, UpdatePartitionStatus, commit


def status(epoch: int, primary: str, **kw: Any) -> PartitionStatus:
    return PartitionStatus.model_validate(
        {
            "state": "Active",
            "epoch": epoch,
            "primary": primary,
            "replicas": [primary],
            "inSync": [primary],
            **kw,
        }
    )


def update(name: str, st: PartitionStatus) -> UpdatePartitionStatus:
    return UpdatePartitionStatus(name=name, status=st, reason="FailedOver", message="")


def test_encoding_keeps_the_assignment_and_drops_the_reported_figures() -> None:
    full = status(4, "mm-1", logEndOffset=900, backlog=7, replicaOffsets={"mm-1": 900})
    text = encode({"p0": MapEntry.of("uid-0", full)})
    raw = json.loads(text)["partitions"]["p0"]
    assert raw["uid"] == "uid-0" and raw["status"]["epoch"] == 4 and raw["status"]["primary"] == "mm-1"
    assert "logEndOffset" not in raw["status"] and "backlog" not in raw["status"]
    back = decode(text)["p0"]
    assert (back.status.epoch, back.status.primary, back.status.log_end_offset) == (4, "mm-1", 0)
    # Applied to a Partition's older status: its figures stay, the assignment is the entry's.
    merged = back.applied_to(status(3, "mm-0", logEndOffset=800))
    assert (merged.epoch, merged.primary, merged.log_end_offset) == (4, "mm-1", 800)


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[]",
        '{"version": 9, "partitions": {}}',
        '{"version": 1}',
        '{"version": 1, "partitions": {"p": {}}}',
        '{"version": 1, "partitions": {"p": {"uid": "u", "status": {"epoch": -1}}}}',
        '{"version": 1, "partitions": {"p": {"uid": "u", "resourceVersion": 5, "status": {}}}}',
    ],
)
def test_a_bad_map_is_refused_with_a_reason(text: str) -> None:
    with pytest.raises(AssignmentMapError):
        decode(text)
    assert decode("") == {} and decode(None) == {}


def seen(uid: str, epoch: int, rv: str = "7", in_sync: tuple[str, ...] = ()) -> commit.Seen:
    return commit.Seen(uid=uid, epoch=epoch, resource_version=rv, in_sync=frozenset(in_sync))


def test_only_primary_changes_are_committed_early_and_caught_up_entries_go() -> None:
    epochs = {
        "p0": seen("u0", 1, in_sync=("a",)),
        "p1": seen("u1", 1),
        "p2": seen("u2", 5),
        "p3": seen("u3-new", 0),
    }
    # Reported figures only (same epoch, same in-sync set): nothing to commit early.
    assert commit.map_commit(Plan(changes=(update("p0", status(1, "a")),)), epochs, {}) is None
    old = {
        "p2": MapEntry.of("u2", status(5, "b")),  # its Partition caught up: dropped
        "p3": MapEntry.of("u3-old", status(2, "b")),  # a re-created Partition: dropped
        "p1": MapEntry.of("u1", status(2, "c")),  # still ahead: kept
    }
    entries = commit.map_commit(Plan(changes=(update("p0", status(2, "b")),)), epochs, old)
    assert entries is not None and set(entries) == {"p0", "p1"}
    assert (entries["p0"].uid, entries["p0"].status.epoch, entries["p0"].status.primary) == ("u0", 2, "b")


def test_partitions_behind_the_map_are_seen_through_it_and_their_statuses_follow() -> None:
    entries = {"p0": MapEntry.of("u0", status(3, "b")), "p1": MapEntry.of("u1", status(3, "b"))}
    observed: dict[str, commit.Observed] = {
        "p0": (seen("u0", 2), status(2, "a", backlog=4)),
        "p1": (seen("u1", 3), status(3, "b")),  # caught up
    }
    behind = commit.overlay(observed, entries)
    assert set(behind) == {"p0"} and (behind["p0"].epoch, behind["p0"].primary, behind["p0"].backlog) == (
        3,
        "b",
        4,
    )
    planned = Plan(changes=(update("p9", status(1, "a")),))
    out = commit.follow_ups(behind, planned)
    assert [c.name for c in out.updates()] == ["p9", "p0"] and out.updates()[1].status.epoch == 3
    # A plan that writes the partition anyway carries the assignment: no second write.
    again = commit.follow_ups(behind, Plan(changes=(update("p0", status(3, "b")),)))
    assert [c.name for c in again.updates()] == ["p0"]


def test_a_lost_backups_removal_from_the_in_sync_set_is_committed_early_against_one_version() -> None:
    """The primary acknowledges nothing while a lost backup is in its in-sync set, and the removal
    keeps the epoch: it goes into the map tied to the Partition's resourceVersion."""
    both = status(4, "a", replicas=["a", "b"], inSync=["a", "b"])
    shrunk = status(4, "a", replicas=["a", "c"], inSync=["a"])
    at = {"p0": seen("u0", 4, rv="100", in_sync=("a", "b"))}
    entries = commit.map_commit(Plan(changes=(update("p0", shrunk),)), at, {})
    assert entries is not None and entries["p0"].resource_version == "100"
    assert entries["p0"].status.in_sync == ["a"]
    entry = decode(encode(entries))["p0"]
    # A broker takes it while the Partition is at that version, not after any other write to it.
    assert ahead(entry, "u0", 4, "100", ["a", "b"])
    assert not ahead(entry, "u0", 4, "101", ["a", "b"]) and not ahead(entry, "u0", 4, None, ["a", "b"])
    # ...and whose status still names the removed replica (the operator's ``pending``).
    assert not ahead(entry, "u0", 4, "100", ["a"])
    # The operator plans with it until a status carries the removal, whatever else wrote the
    # Partition meanwhile (here a label change: version 101, the status still names b).
    assert commit.overlay({"p0": (at["p0"], both)}, {"p0": entry})["p0"].in_sync == ["a"]
    relabelled = seen("u0", 4, rv="101", in_sync=("a", "b"))
    assert commit.overlay({"p0": (relabelled, both)}, {"p0": entry})["p0"].in_sync == ["a"]
    carried = seen("u0", 4, rv="102", in_sync=("a",))
    assert commit.overlay({"p0": (carried, shrunk)}, {"p0": entry}) == {}
    # A replica joining the in-sync set is no reason to write the map...
    grown = status(4, "a", replicas=["a", "c"], inSync=["a", "c"])
    assert (
        commit.map_commit(Plan(changes=(update("p0", grown),)), {"p0": seen("u0", 4, in_sync=("a",))}, {})
        is None
    )
    # ...unless an entry that removed a replica is still in it: it must go first, or the operator
    # would take the grown status for a removal not carried out yet.
    again = commit.map_commit(Plan(changes=(update("p0", grown),)), {"p0": carried}, {"p0": entry})
    assert again == {}
    assert commit.superseded(Plan(changes=(update("p0", grown),)), {"p0": entry}) == {"p0"}
    assert commit.superseded(Plan(changes=(update("p0", shrunk),)), {"p0": entry}) == frozenset()
    # An entry that raised the epoch counts by its epoch alone, for brokers and the operator alike.
    promoted = MapEntry.of("u0", status(5, "c"))
    assert ahead(promoted, "u0", 4, "100", ["a"]) and not ahead(promoted, "u0", 5, "100", ["c"])
    assert commit.overlay({"p0": (seen("u0", 5, in_sync=("c", "a")), grown)}, {"p0": promoted}) == {}


def partition(name: str, epoch: int, primary: str, uid: str = "u0", rv: str = "1") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": rv},
        "spec": {"cluster": "demo", "type": "fixed", "replicas": 2},
        "status": {
            "state": "Active",
            "epoch": epoch,
            "primary": primary,
            "replicas": [primary],
            "inSync": [primary],
        },
    }


def configmap(partitions: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": "demo-assignments"},
        "data": {"assignments.json": json.dumps({"version": 1, "partitions": partitions})},
    }


def test_a_broker_acts_on_the_map_until_the_partition_catches_up() -> None:
    src = KubeAssignmentSource("demo", "ns", api_client=object())
    src.apply_listing(PARTITIONS, [partition("p0", 2, "mm-0"), partition("p1", 2, "mm-0", uid="u1")])
    src.apply_listing(MAP, [])
    notified: list[int] = []
    src.subscribe(lambda: notified.append(1))
    entry = {"uid": "u0", "status": {"state": "Active", "epoch": 3, "primary": "mm-1", "replicas": ["mm-1"]}}
    stale = {"uid": "other", "status": {"state": "Active", "epoch": 9, "primary": "mm-2"}}
    src.apply_event(MAP, "ADDED", configmap({"p0": entry, "p1": stale}))
    assert (src.partitions()["p0"].epoch, src.primary_of("p0")) == (3, "mm-1")
    assert src.primary_of("p1") == "mm-0"  # an entry of another Partition of that name: ignored
    assert notified
    # A malformed map is ignored; what was committed stands.
    src.apply_event(
        MAP, "MODIFIED", {"metadata": {"name": "demo-assignments"}, "data": {"assignments.json": "{"}}
    )
    assert src.primary_of("p0") == "mm-1"
    # The Partition caught up and went on (a new in-sync set at the same epoch): the Partition wins.
    later = partition("p0", 3, "mm-1")
    later["status"]["inSync"] = ["mm-1", "mm-0"]
    src.apply_event(PARTITIONS, "MODIFIED", later)
    assert src.partitions()["p0"].in_sync == ("mm-1", "mm-0")
    src.apply_event(MAP, "DELETED", configmap({}))
    assert (src.partitions()["p0"].epoch, src.primary_of("p0")) == (3, "mm-1")


def test_a_broker_takes_an_in_sync_removal_from_the_map_until_the_partition_changes() -> None:
    src = KubeAssignmentSource("demo", "ns", api_client=object())
    before = partition("p0", 5, "mm-0", rv="40")
    before["status"]["replicas"] = before["status"]["inSync"] = ["mm-0", "mm-2"]
    src.apply_listing(PARTITIONS, [before])
    src.apply_listing(MAP, [])
    removal = {
        "uid": "u0",
        "resourceVersion": "40",
        "status": {
            "state": "Active",
            "epoch": 5,
            "primary": "mm-0",
            "replicas": ["mm-0"],
            "inSync": ["mm-0"],
        },
    }
    src.apply_event(MAP, "MODIFIED", configmap({"p0": removal}))
    assert src.partitions()["p0"].in_sync == ("mm-0",)
    # Any newer version of the Partition wins, even one that still names mm-2 (the safe side).
    other = partition("p0", 5, "mm-0", rv="41")
    other["status"]["replicas"] = other["status"]["inSync"] = ["mm-0", "mm-2"]
    src.apply_event(PARTITIONS, "MODIFIED", other)
    assert src.partitions()["p0"].in_sync == ("mm-0", "mm-2")
    # The same entry without a version (an older operator's map) never counted at the same epoch.
    src = KubeAssignmentSource("demo", "ns", api_client=object())
    src.apply_listing(PARTITIONS, [before])
    src.apply_event(
        MAP, "MODIFIED", configmap({"p0": {k: v for k, v in removal.items() if k != "resourceVersion"}})
    )
    assert src.partitions()["p0"].in_sync == ("mm-0", "mm-2")


def test_a_change_to_a_partition_the_map_is_still_ahead_of_stays_a_change_of_epoch() -> None:
    """The map promoted c at epoch 5; the Partition as written is still at epoch 4. A plan made
    from the map's view changes the partition again at epoch 5: its entry must still count by its
    epoch (a removal entry would wait for a status at epoch 5, and brokers would go back to the old
    primary), and an entry still ahead of its Partition stays in the map."""
    promoted = MapEntry.of("u0", status(5, "c", replicas=["c", "a"], inSync=["c", "a"]))
    written = {"p0": seen("u0", 4, rv="100", in_sync=("b", "c", "a")), "p1": seen("u1", 4, rv="7")}
    other = MapEntry.of("u1", status(5, "d"))
    narrower = status(5, "c", replicas=["c", "e"], inSync=["c"])
    entries = commit.map_commit(
        Plan(changes=(update("p0", narrower),)), written, {"p0": promoted, "p1": other}
    )
    assert entries is not None
    assert entries["p0"].resource_version == "" and entries["p0"].status.in_sync == ["c"]
    assert ahead(entries["p0"], "u0", 4, "100", ["b"]) and ahead(entries["p0"], "u0", 4, "101", ["b"])
    assert entries["p1"] == other


def test_a_broker_follows_a_replica_placed_again_even_at_the_version_a_removal_was_planned_on() -> None:
    """The stall this guards against: the operator dropped a lost backup mm-0 (a removal entry),
    mm-0 came back and was placed again; a status at the version the entry names already carries
    the removal and names mm-0 again. The operator no longer plans with the entry (and may never
    write that Partition again); a broker following the entry would leave mm-0 without its copy and
    the partition below its minimum in-sync count for good."""
    src = KubeAssignmentSource("demo", "ns", api_client=object())
    placed_again = partition("p0", 1, "mm-1", rv="11498")
    placed_again["status"]["replicas"] = ["mm-1", "mm-0"]
    placed_again["status"]["inSync"] = ["mm-1"]
    src.apply_listing(PARTITIONS, [placed_again])
    removal = {
        "uid": "u0",
        "resourceVersion": "11498",
        "status": {
            "state": "Active",
            "epoch": 1,
            "primary": "mm-1",
            "replicas": ["mm-1"],
            "inSync": ["mm-1"],
        },
    }
    src.apply_event(MAP, "MODIFIED", configmap({"p0": removal}))
    assert src.partitions()["p0"].replicas == ("mm-1", "mm-0")
    assert not commit.overlay(
        {"p0": (seen("u0", 1, rv="11498", in_sync=("mm-1",)), PartitionStatus())},
        decode(configmap({"p0": removal})["data"]["assignments.json"]),
    )


def test_a_watch_event_read_before_a_relisting_does_not_undo_it() -> None:
    """After a lost lease the MM relists the Partitions while its watch thread may still hand over
    events it read earlier: an older version never replaces a newer one, and a listing older than
    an event already applied keeps the event's version."""
    src = KubeAssignmentSource("demo", "ns", api_client=object())
    newer = partition("p0", 2, "mm-1", rv="50")
    newer["status"]["replicas"] = ["mm-1", "mm-0"]
    src.apply_listing(PARTITIONS, [newer], "50")
    src.apply_event(PARTITIONS, "MODIFIED", partition("p0", 1, "mm-2", rv="45"))
    assert (src.primary_of("p0"), src.partitions()["p0"].replicas) == ("mm-1", ("mm-1", "mm-0"))
    # A listing taken at version 48 arrives after the event of version 50 and a creation at 49.
    src.apply_event(PARTITIONS, "ADDED", partition("p1", 0, "mm-0", uid="u1", rv="49"))
    src.apply_listing(PARTITIONS, [partition("p0", 1, "mm-2", rv="45")], "48")
    assert src.primary_of("p0") == "mm-1" and src.primary_of("p1") == "mm-0"
    # A newer listing wins, and drops what it no longer holds.
    src.apply_listing(PARTITIONS, [partition("p0", 3, "mm-0", rv="60")], "60")
    assert src.primary_of("p0") == "mm-0" and "p1" not in src.partitions()
