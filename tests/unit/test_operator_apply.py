"""Applying a plan: fenced status writes, tolerated conflicts, events, and the scale-down gate."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from hybridmq.api.resources import FailoverRecord, PartitionSpec, PartitionStatus, PartitionType
from hybridmq.planner import (
    CreatePartition,
    DeletePartition,
    Plan,
    PlanEvent,
    ReleaseFinalizer,
    UpdatePartitionStatus,
)
from hybridmq_operator import apply, kube
from hybridmq_operator.handlers.children import mm_replicas_to_apply
from hybridmq_operator.main import parse_args
from hybridmq_operator.settings import ClusterSettings

SETTINGS = ClusterSettings(name="demo", namespace="ns", uid="u")
FAILOVER = FailoverRecord(
    from_="demo-mm-0",
    to="demo-mm-1",
    reason="pod deleted",
    duration_seconds=0.4,
    time=datetime(2026, 1, 1, tzinfo=UTC),
)


class FakeKube:
    def __init__(self, conflict_on: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        self.calls: list[tuple[str, Any]] = []
        self.conflict_on = conflict_on

    def create(self, manifest: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("create", manifest))
        return {**manifest, "metadata": {**manifest["metadata"], "resourceVersion": "1", "uid": "p"}}

    def merge_patch(
        self, api_version: str, kind: str, ns: str, name: str, patch: dict[str, Any], sub: str = ""
    ) -> dict[str, Any]:
        self.calls.append(("patch" + (f"/{sub}" if sub else ""), (name, patch)))
        if name in self.conflict_on:
            raise kube.KubeError(409, "the object has been modified")
        # As the API server answers: the whole object, its server-side apply bookkeeping included.
        managed = [{"manager": "hybridmq-operator", "operation": "Update", "fieldsV1": {"f:status": {}}}]
        meta = {"name": name, "namespace": ns, "resourceVersion": "99", "uid": "p", "managedFields": managed}
        return {**patch, "metadata": meta}

    def delete(self, api_version: str, kind: str, ns: str, name: str) -> bool:
        self.calls.append(("delete", name))
        return True


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeKube:
    f = FakeKube()
    for attr in ("create", "merge_patch", "delete"):
        monkeypatch.setattr(kube, attr, getattr(f, attr))
    return f


def current(name: str, rv: str = "7") -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": "x",
            "resourceVersion": rv,
            "finalizers": ["hybridmq.io/partition-data", "other"],
        }
    }


def test_create_then_status(fake: FakeKube) -> None:
    change = CreatePartition(
        name="demo-fixed-0",
        spec=PartitionSpec(cluster="demo", type=PartitionType.FIXED, replicas=2),
        status=PartitionStatus(primary="demo-mm-0", replicas=["demo-mm-0", "demo-mm-1"], epoch=1),
        labels={"hybridmq.io/partition-type": "fixed"},
        reason="PartitionCreated",
        message="fixed partition created",
    )
    out = apply.apply_plan(SETTINGS, Plan(changes=(change,)), {}, {})
    kind, manifest = fake.calls[0]
    assert kind == "create"
    assert manifest["metadata"]["finalizers"] == ["hybridmq.io/partition-data"]
    assert manifest["metadata"]["ownerReferences"][0]["uid"] == "u"
    assert manifest["metadata"]["labels"]["hybridmq.io/cluster"] == "demo"
    assert manifest["spec"] == {"cluster": "demo", "type": "fixed", "replicas": 2}
    kind, (_name, patch) = fake.calls[1]
    assert kind == "patch/status" and patch["metadata"]["resourceVersion"] == "1"
    assert patch["status"]["primary"] == "demo-mm-0" and patch["status"]["epoch"] == 1
    assert "demo-fixed-0" in out.written
    assert [e.reason for _, e in out.events] == ["PartitionCreated"]


def test_status_update_is_fenced_and_conflicts_are_skipped(fake: FakeKube) -> None:
    fake.conflict_on = {"stale"}
    failover = FAILOVER
    ok = UpdatePartitionStatus(
        "fresh",
        PartitionStatus(primary="demo-mm-1", epoch=2, last_failover=failover),
        "Failover",
        "m",
        (PlanEvent("PrimaryLost", "a"), PlanEvent("Failover", "b")),
    )
    stale = UpdatePartitionStatus("stale", PartitionStatus(primary=None), "Offline", "m")
    out = apply.apply_plan(
        SETTINGS,
        Plan(changes=(ok, stale)),
        {"fresh": current("fresh", "7"), "stale": current("stale", "8")},
        {},
    )
    patches = {c[1][0]: c[1][1] for c in fake.calls if c[0] == "patch/status"}
    assert patches["fresh"]["metadata"]["resourceVersion"] == "7"
    # A null clears the primary (merge patch semantics).
    assert "primary" in patches["stale"]["status"] and patches["stale"]["status"]["primary"] is None
    assert out.conflicts == 1 and set(out.written) == {"fresh"}
    # What is kept until the watch shows the write is the object without managedFields.
    kept = out.written["fresh"]
    assert kept["metadata"] == {"name": "fresh", "namespace": "ns", "resourceVersion": "99", "uid": "p"}
    assert kept["status"]["primary"] == "demo-mm-1" and kept["status"]["epoch"] == 2
    assert [e.reason for _, e in out.events] == ["PrimaryLost", "Failover"]
    assert out.failovers == [("fresh", 0.4)]


def test_delete_and_release(fake: FakeKube) -> None:
    p = Plan(
        changes=(
            DeletePartition("od-1", "PartitionDeleted", "drained"),
            ReleaseFinalizer("od-0", "DataDeleted", "gone"),
        )
    )
    out = apply.apply_plan(SETTINGS, p, {"od-1": current("od-1"), "od-0": current("od-0", "5")}, {})
    assert ("delete", "od-1") in fake.calls
    (release,) = [c for c in fake.calls if c[0] == "patch"]
    assert release[1] == ("od-0", {"metadata": {"finalizers": ["other"], "resourceVersion": "5"}})
    assert out.deleted == {"od-0"}
    assert [e.reason for _, e in out.events] == ["PartitionDeleted", "DataDeleted"]


def test_mm_statefulset_never_shrinks_before_evacuation() -> None:
    assert mm_replicas_to_apply(3, None) == 3
    assert mm_replicas_to_apply(4, 3) == 4
    assert mm_replicas_to_apply(3, 4) == 4


def test_main_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYBRIDMQ_OPERATOR_NAMESPACES", "a,b")
    monkeypatch.setenv("HYBRIDMQ_OPERATOR_PEERING", "hybridmq")
    args = parse_args(["--liveness", "http://127.0.0.1:8081/healthz"])
    assert args.namespace == ["a", "b"] and args.peering == "hybridmq" and not args.standalone
    assert args.liveness == "http://127.0.0.1:8081/healthz"
    with pytest.raises(SystemExit):
        parse_args(["--standalone", "--peering", "x"])


def test_operator_holds_every_permission_it_grants_the_brokers() -> None:
    """RBAC escalation prevention: the operator can only create the brokers' Role if it holds
    every rule in it."""
    from hybridmq_operator.rbac import OPERATOR_RULES
    from hybridmq_operator.resources.rbac import BROKER_RULES

    held = {
        (group, resource, verb)
        for rule in OPERATOR_RULES
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    for rule in BROKER_RULES:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    assert (group, resource, verb) in held, (group, resource, verb)
    assert all("*" not in rule["verbs"] and "*" not in rule["resources"] for rule in OPERATOR_RULES)


def test_peering_manifests() -> None:
    from hybridmq_operator.peering import PEERING_CRDS, peering_object

    assert [c["metadata"]["name"] for c in PEERING_CRDS] == [
        "clusterkopfpeerings.kopf.dev",
        "kopfpeerings.kopf.dev",
    ]
    assert peering_object("ns")["kind"] == "KopfPeering" and peering_object()["kind"] == "ClusterKopfPeering"


def test_a_failover_already_in_the_status_is_not_counted_again(fake: FakeKube) -> None:
    # What the API server hands back: the time with a "Z", as the previous round wrote it.
    record = FAILOVER
    stored = {
        **current("p"),
        "status": {
            "lastFailover": {
                "from": "demo-mm-0",
                "to": "demo-mm-1",
                "reason": "pod deleted",
                "durationSeconds": 0.4,
                "time": "2026-01-01T00:00:00Z",
            }
        },
    }
    later = UpdatePartitionStatus(
        "p",
        PartitionStatus(primary="demo-mm-1", epoch=2, backlog=5, last_failover=record),
        "StatusObserved",
        "m",
    )
    out = apply.apply_plan(SETTINGS, Plan(changes=(later,)), {"p": stored}, {})
    assert out.failovers == [] and out.failover_records == []
    newer = record.model_copy(
        update={"time": datetime(2026, 1, 1, 0, 0, 5, tzinfo=UTC), "from_": "demo-mm-1"}
    )
    again = UpdatePartitionStatus(
        "p", PartitionStatus(primary="demo-mm-2", epoch=3, last_failover=newer), "F", "m"
    )
    out = apply.apply_plan(SETTINGS, Plan(changes=(again,)), {"p": stored}, {})
    assert out.failovers == [("p", 0.4)] and out.failover_records == [("p", newer)]
