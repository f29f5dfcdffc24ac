"""From raw pod, Lease and Partition bodies to the planner's state, and through the planner."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from hybridmq.api.lease_report import MMReport, PartitionReport
from hybridmq.planner import CreatePartition, UpdatePartitionStatus, domain_spread, plan
from hybridmq_operator import incarnations, names, observe
from hybridmq_operator.handlers import cluster_status

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def stamp(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def cluster(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "hybridmq.io/v1alpha1",
        "kind": "BrokerCluster",
        "metadata": {"name": "demo", "namespace": "ns", "uid": "u", "generation": 1},
        "spec": spec,
    }


def pod(
    name: str, role: str = "mm", ready: bool = True, ip: str = "127.0.1.1", **extra: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "ns", "labels": names.common_labels("demo", role)},
        "status": {
            "phase": "Running",
            "podIP": ip,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "containerStatuses": [{"name": role, "state": {"running": {}}, "restartCount": 0}],
        },
    }
    for key, value in extra.items():
        body["metadata" if key == "deletionTimestamp" else "status"][key] = value
    return body


def lease(name: str, renewed: datetime, report: MMReport | None = None) -> dict[str, Any]:
    ann = {"hybridmq.io/report": report.to_annotation()} if report else {}
    return {
        "metadata": {"name": name, "namespace": "ns", "annotations": ann},
        "spec": {"holderIdentity": name, "leaseDurationSeconds": 1, "renewTime": stamp(renewed)},
    }


def partition(name: str, primary: str, replicas: list[str], epoch: int = 1, rv: str = "10") -> dict[str, Any]:
    return {
        "apiVersion": "hybridmq.io/v1alpha1",
        "kind": "Partition",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "resourceVersion": rv,
            "finalizers": ["hybridmq.io/partition-data"],
        },
        "spec": {"cluster": "demo", "type": "fixed", "replicas": len(replicas)},
        "status": {
            "state": "Active",
            "epoch": epoch,
            "primary": primary,
            "replicas": replicas,
            "inSync": replicas,
        },
    }


def test_pod_failure_reasons() -> None:
    assert observe.pod_failure(pod("a")) is None
    assert observe.pod_failure(pod("a", deletionTimestamp=stamp(NOW))) == "pod deleted"
    assert observe.pod_failure(pod("a", phase="Failed")) == "pod failed"
    restarting = pod("a")
    restarting["status"]["containerStatuses"] = [
        {"name": "mm", "state": {"waiting": {"reason": "CrashLoopBackOff"}}, "restartCount": 2}
    ]
    assert "restarting" in str(observe.pod_failure(restarting))
    # The first crash, during its restart back-off: no restart counted yet, the last state ended.
    first_crash = pod("a")
    first_crash["status"]["containerStatuses"] = [
        {
            "name": "mm",
            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"exitCode": 137, "reason": "Error"}},
            "restartCount": 0,
        }
    ]
    assert "restarting" in str(observe.pod_failure(first_crash))
    # A container that has not started yet is not a crash.
    creating = pod("a")
    creating["status"]["containerStatuses"] = [
        {
            "name": "mm",
            "state": {"waiting": {"reason": "ContainerCreating"}},
            "lastState": {},
            "restartCount": 0,
        }
    ]
    assert observe.pod_failure(creating) is None
    # An unready but running MM is not lost (it may be catching up).
    assert observe.pod_failure(pod("a", ready=False)) is None


def test_mm_lost_by_missing_pod_or_expired_lease() -> None:
    gone = observe.observe_mm("demo-mm-0", None, None, NOW, False, {"demo-mm-0": NOW - timedelta(seconds=1)})
    assert not gone.alive and gone.lost_reason == "pod deleted"
    assert gone.lost_since == NOW - timedelta(seconds=1)
    fresh = observe.observe_mm(
        "demo-mm-1", pod("demo-mm-1"), lease("demo-mm-1", NOW - timedelta(milliseconds=300)), NOW, False
    )
    assert fresh.alive and fresh.ready
    stale = observe.observe_mm(
        "demo-mm-2", pod("demo-mm-2"), lease("demo-mm-2", NOW - timedelta(seconds=3)), NOW, False
    )
    assert not stale.alive and stale.lost_reason == "lease expired"
    assert stale.lost_since == NOW - timedelta(seconds=2)
    no_lease = observe.observe_mm("demo-mm-3", pod("demo-mm-3", ready=False), None, NOW, True)
    assert no_lease.alive and not no_lease.ready and no_lease.leaving and not no_lease.eligible


def test_a_new_observer_gives_every_lease_one_duration_of_its_own_watching() -> None:
    """A standby that took over lists the Leases before a long pod listing: its first round sees
    renewals 1.2 s old with a 1 s Lease while every MM renews. It calls a Lease over only once it
    has itself watched for a whole duration without seeing a renewal."""
    renewed = NOW - timedelta(milliseconds=1200)

    def mm(watching_since: datetime | None) -> Any:
        return observe.observe_mm(
            "demo-mm-0",
            pod("demo-mm-0"),
            lease("demo-mm-0", renewed),
            NOW,
            False,
            watching_since=watching_since,
        )

    assert not mm(None).alive  # the renewal alone says over
    just_took_over = mm(NOW - timedelta(milliseconds=100))
    assert just_took_over.alive and just_took_over.lost_reason is None
    watched_long_enough = mm(NOW - timedelta(milliseconds=1001))
    assert not watched_long_enough.alive and watched_long_enough.lost_reason == "lease expired"
    # Lost as of the end of its own watching duration, not earlier.
    assert watched_long_enough.lost_since == NOW - timedelta(milliseconds=1)
    # A watching start older than the renewal changes nothing.
    assert not mm(NOW - timedelta(seconds=30)).alive
    assert mm(NOW - timedelta(seconds=30)).lost_since == renewed + timedelta(seconds=1)
    snap = observe.Snapshot(
        cluster=cluster(), pods=(pod("demo-mm-0"),), leases=(lease("demo-mm-0", renewed),), partitions=()
    )
    (seen,) = observe.cluster_state(snap, NOW, desired_mms=1, watching_since=NOW).message_managers
    assert seen.alive


def test_reports_feed_offsets_storage_and_the_primary_view() -> None:
    rep0 = MMReport(
        partitions={
            "demo-fixed-0": PartitionReport(
                role="primary",
                epoch=1,
                log_end_offset=50,
                in_sync=["demo-mm-0", "demo-mm-1"],
                backlog=7,
                producers=2,
            )
        }
    )
    rep1 = MMReport(partitions={"demo-fixed-0": PartitionReport(role="backup", epoch=1, log_end_offset=48)})
    snap = observe.Snapshot(
        cluster=cluster(partitions={"fixed": {"count": 1}, "onDemand": {"perMessageManager": 0}}),
        pods=(pod("demo-mm-0", ip="127.0.1.1"), pod("demo-mm-1", ip="127.0.1.2")),
        leases=(lease("demo-mm-0", NOW, rep0), lease("demo-mm-1", NOW, rep1)),
        partitions=(partition("demo-fixed-0", "demo-mm-0", ["demo-mm-0", "demo-mm-1"]),),
    )
    state = observe.cluster_state(snap, NOW, desired_mms=2)
    mm0 = next(m for m in state.message_managers if m.name == "demo-mm-0")
    assert mm0.stored == frozenset({"demo-fixed-0"}) and mm0.log_end_offsets == {"demo-fixed-0": 50}
    (info,) = state.partitions
    assert info.report is not None
    assert info.report.log_end_offsets == {"demo-mm-0": 50, "demo-mm-1": 48}
    assert (info.report.backlog, info.report.producers) == (7, 2)


def test_a_changed_report_on_the_same_lease_is_read_again() -> None:
    """Reports are parsed once per text: the next round with a new report sees the new figures."""
    snap_of = lambda offset: observe.Snapshot(  # noqa: E731
        cluster=cluster(partitions={"fixed": {"count": 1}, "onDemand": {"perMessageManager": 0}}),
        pods=(pod("demo-mm-0", ip="127.0.1.1"),),
        leases=(
            lease(
                "demo-mm-0",
                NOW,
                MMReport(
                    partitions={
                        "demo-fixed-0": PartitionReport(role="primary", epoch=1, log_end_offset=offset)
                    }
                ),
            ),
        ),
        partitions=(partition("demo-fixed-0", "demo-mm-0", ["demo-mm-0"]),),
    )
    for offset in (5, 5, 9, 5):
        (mm0,) = observe.cluster_state(snap_of(offset), NOW, desired_mms=1).message_managers
        assert mm0.log_end_offsets == {"demo-fixed-0": offset}


def test_a_round_reuses_a_partitions_view_only_while_its_resource_and_every_report_are_the_same() -> None:
    """Rounds share one cache: what the primary reported reaches the partition's view every round."""
    cache = observe.PartitionCache()
    body = partition("demo-fixed-0", "demo-mm-0", ["demo-mm-0", "demo-mm-1"], rv="10")

    def round_with(leo0: int, leo1: int, part: dict[str, Any]) -> Any:
        report0 = MMReport(
            partitions={"demo-fixed-0": PartitionReport(role="primary", epoch=1, log_end_offset=leo0)}
        )
        report1 = MMReport(
            partitions={"demo-fixed-0": PartitionReport(role="backup", epoch=1, log_end_offset=leo1)}
        )
        snap = observe.Snapshot(
            cluster=cluster(partitions={"fixed": {"count": 1}, "onDemand": {"perMessageManager": 0}}),
            pods=(pod("demo-mm-0", ip="127.0.1.1"), pod("demo-mm-1", ip="127.0.1.2")),
            leases=(lease("demo-mm-0", NOW, report0), lease("demo-mm-1", NOW, report1)),
            partitions=(part,),
        )
        (info,) = observe.cluster_state(snap, NOW, desired_mms=2, cache=cache).partitions
        return info

    first = round_with(5, 4, body)
    assert first.report is not None and first.report.log_end_offsets == {"demo-mm-0": 5, "demo-mm-1": 4}
    assert round_with(5, 4, body) is first
    # The backup's report alone changed: its offset reaches the primary's partition view.
    moved = round_with(5, 5, body)
    assert moved.report is not None and moved.report.log_end_offsets == {"demo-mm-0": 5, "demo-mm-1": 5}
    # The resource changed (a failover to demo-mm-1), the reports did not.
    failed_over = partition("demo-fixed-0", "demo-mm-1", ["demo-mm-1", "demo-mm-0"], epoch=2, rv="11")
    after = round_with(5, 5, failed_over)
    assert after.status is not None and after.status.primary == "demo-mm-1"
    assert after.report is None  # demo-mm-1 reports itself a backup at epoch 1: not a primary's view


def test_fresh_cluster_plans_fixed_and_on_demand_partitions() -> None:
    snap = observe.Snapshot(
        cluster=cluster(),
        pods=tuple(pod(f"demo-mm-{i}", ip=f"127.0.1.{i + 1}") for i in range(3)),
        leases=(),
        partitions=(),
    )
    result = plan(observe.cluster_state(snap, NOW, desired_mms=3))
    creates = [c for c in result.changes if isinstance(c, CreatePartition)]
    fixed = sorted(c.name for c in creates if c.spec.type.value == "fixed")
    assert fixed == ["demo-fixed-0", "demo-fixed-1", "demo-fixed-2"]
    assert sum(1 for c in creates if c.spec.type.value == "on-demand") == 3
    for c in creates:
        assert c.status.primary is not None and len(set(c.status.replicas)) == len(c.status.replicas) == 2


def test_deleted_primary_pod_fails_over_with_epoch_plus_one() -> None:
    parts = (partition("demo-fixed-0", "demo-mm-0", ["demo-mm-0", "demo-mm-1"], epoch=4),)
    snap = observe.Snapshot(
        cluster=cluster(partitions={"fixed": {"count": 1}, "onDemand": {"perMessageManager": 0}}),
        pods=(pod("demo-mm-0", deletionTimestamp=stamp(NOW)), pod("demo-mm-1"), pod("demo-mm-2")),
        leases=(),
        partitions=parts,
    )
    result = plan(observe.cluster_state(snap, NOW, desired_mms=3))
    (update,) = [c for c in result.changes if isinstance(c, UpdatePartitionStatus)]
    assert update.status.primary == "demo-mm-1" and update.status.epoch == 5
    assert "demo-mm-0" not in update.status.replicas
    assert update.status.last_failover is not None and update.status.last_failover.from_ == "demo-mm-0"


def test_broker_table_and_cluster_status() -> None:
    snap = observe.Snapshot(
        cluster=cluster(partitions={"fixed": {"count": 1}, "onDemand": {"perMessageManager": 0}}),
        pods=(pod("demo-cm-0", role="cm", ip="127.0.2.1"), pod("demo-mm-0", ip="127.0.1.1", ready=False)),
        leases=(),
        partitions=(partition("demo-fixed-0", "demo-mm-0", ["demo-mm-0"]),),
    )
    table = observe.broker_table(snap)
    assert table == [
        {
            "name": "demo-cm-0",
            "role": "cm",
            "address": f"127.0.2.1:{names.CM_CLIENT_PORT}",
            "httpAddress": f"127.0.2.1:{names.HTTP_PORT}",
            "ready": True,
        },
        {
            "name": "demo-mm-0",
            "role": "mm",
            "address": f"127.0.1.1:{names.MM_PORT}",
            "httpAddress": f"127.0.1.1:{names.HTTP_PORT}",
            "ready": False,
        },
    ]
    state = observe.cluster_state(snap, NOW, desired_mms=1)
    obs = observe.cluster_observation(state, snap, cm_desired=1, mm_desired=1)
    status = cluster_status.cluster_status(obs, state, table, {}, 1, NOW, on_demand_expected=False)
    assert status["observedGeneration"] == 1
    assert (status["readyConnectionManagers"], status["readyMessageManagers"]) == (1, 0)
    assert status["partitions"]["fixed"] == 1 and status["partitions"]["active"] == 1
    conds = {c["type"]: c["status"] for c in status["conditions"]}
    assert conds == {"Ready": "False", "PartitionsAvailable": "True", "Degraded": "True"}
    assert not cluster_status.changed(status, dict(status))
    assert cluster_status.changed(status, {**status, "readyMessageManagers": 1})


def _mm_lease(acquired: datetime, accounted: datetime | None = None, owner: str = "uid-0") -> dict[str, Any]:
    body = lease("demo-mm-0", NOW)
    body["spec"]["acquireTime"] = stamp(acquired)
    body["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": "demo-mm-0", "uid": owner}
    ]
    if accounted is not None:
        body["metadata"]["annotations"]["hybridmq.io/accounted-incarnation"] = stamp(accounted)
    return body


def _mm_pods() -> list[dict[str, Any]]:
    out = []
    for i in range(2):
        body = pod(f"demo-mm-{i}")
        body["metadata"]["uid"] = f"uid-{i}"
        out.append(body)
    return out


def _state_of(mm0_lease: dict[str, Any], pods: list[dict[str, Any]] | None = None) -> Any:
    snap = observe.Snapshot(
        cluster=cluster(),
        pods=tuple(pods if pods is not None else _mm_pods()),
        leases=(mm0_lease, lease("demo-mm-1", NOW)),
        partitions=(partition("p", "demo-mm-0", ["demo-mm-0", "demo-mm-1"]),),
    )
    return observe.cluster_state(snap, NOW, desired_mms=2)


def test_an_mm_process_not_accounted_for_is_lost_while_a_partition_names_it() -> None:
    old, new = NOW - timedelta(seconds=30), NOW - timedelta(seconds=1)
    assert _state_of(_mm_lease(old, accounted=old)).message_managers[0].alive
    restarted = _state_of(_mm_lease(new, accounted=old)).message_managers[0]
    assert not restarted.alive and restarted.lost_reason == "message manager restarted"
    assert restarted.lost_since == new
    # The planner moves the primary to the in-sync backup at the next epoch.
    update = next(c for c in plan(_state_of(_mm_lease(new, accounted=old))).changes)
    assert isinstance(update, UpdatePartitionStatus)
    assert (update.status.primary, update.status.epoch) == ("demo-mm-1", 2)
    # What the operator has to write once that is applied: the new incarnation on the Lease.
    pods = {p["metadata"]["name"]: p for p in _mm_pods()}
    leases = {"demo-mm-0": _mm_lease(new, accounted=old)}
    assert incarnations.unrecorded(pods, leases) == {"demo-mm-0": stamp(new)}
    assert incarnations.restarted(pods, leases, frozenset()) == frozenset()  # named by no Partition
    # Written by this operator but not delivered by the watch yet: accounted for all the same.
    named = frozenset({"demo-mm-0"})
    assert incarnations.restarted(pods, leases, named) == named
    assert incarnations.restarted(pods, leases, named, {"demo-mm-0": stamp(new)}) == frozenset()
    # A Lease the operator had accounted for, gone while the pod runs: lost at once.
    snap = observe.Snapshot(
        cluster=cluster(),
        pods=tuple(_mm_pods()),
        leases=(lease("demo-mm-1", NOW),),
        partitions=(partition("p", "demo-mm-0", ["demo-mm-0", "demo-mm-1"]),),
    )
    gone = observe.cluster_state(snap, NOW, desired_mms=2, recorded={"demo-mm-0": stamp(old)})
    assert gone.message_managers[0].lost_reason == "lease lost"
    assert observe.cluster_state(snap, NOW, desired_mms=2).message_managers[0].alive  # never had one


def test_a_lease_of_an_earlier_pod_says_nothing_about_the_replacement() -> None:
    pods = _mm_pods()
    pods[0]["metadata"]["uid"] = "uid-replacement"
    pods[0]["status"] = {"phase": "Pending"}  # scheduled to a node that stopped answering
    stale = _mm_lease(NOW - timedelta(seconds=30), accounted=NOW - timedelta(seconds=30))
    mm0 = _state_of(stale, pods).message_managers[0]
    assert not mm0.alive and mm0.lost_reason == "pod replaced"
    assert mm0.stored is None  # the stale Lease's report is not taken either
    update = next(c for c in plan(_state_of(stale, pods)).changes)
    assert isinstance(update, UpdatePartitionStatus) and update.status.primary == "demo-mm-1"
    # Already running, but the Lease under its name is still the old pod's: replaced all the same.
    pods[0]["status"] = pod("demo-mm-0")["status"]
    assert _state_of(stale, pods).message_managers[0].lost_reason == "pod replaced"
    # Once the new process renews the Lease it owns it too, and shows a process not accounted for.
    stale["metadata"]["ownerReferences"].append(
        {"kind": "Pod", "name": "demo-mm-0", "uid": "uid-replacement"}
    )
    stale["spec"]["acquireTime"] = stamp(NOW)
    assert _state_of(stale, pods).message_managers[0].lost_reason == "message manager restarted"


def test_partition_cache_reparses_only_changed_versions() -> None:
    cache = observe.PartitionCache()
    a, b = (
        partition("p-a", "demo-mm-0", ["demo-mm-0"], rv="1"),
        partition("p-b", "demo-mm-0", ["demo-mm-0"], rv="1"),
    )
    first = cache.parse([a, b])
    again = cache.parse([a, b])
    assert [x is y for x, y in zip(first, again, strict=True)] == [True, True]
    b2 = partition("p-b", "demo-mm-1", ["demo-mm-1"], rv="2")
    third = cache.parse([a, b2])
    assert third[0] is first[0] and third[1].status is not None and third[1].status.primary == "demo-mm-1"
    assert len(cache.parse([a])) == 1


def test_a_deleted_pod_whose_mm_asks_for_a_handoff_is_stopping_not_lost() -> None:
    deleting = pod("demo-mm-0", deletionTimestamp=stamp(NOW))
    asking = MMReport(partitions={"p": PartitionReport(role="primary", epoch=1)}, stopping=True)
    renewed = NOW - timedelta(milliseconds=200)
    mm = observe.observe_mm("demo-mm-0", deleting, lease("demo-mm-0", renewed, asking), NOW, False)
    assert mm.alive and mm.stopping and not mm.eligible
    # Without the request (an MM that does not hand off), or once its Lease lapsed: lost.
    silent = MMReport(partitions={"p": PartitionReport(role="primary", epoch=1)})
    gone = observe.observe_mm("demo-mm-0", deleting, lease("demo-mm-0", renewed, silent), NOW, False)
    assert not gone.alive and gone.lost_reason == "pod deleted"
    lapsed = lease("demo-mm-0", NOW - timedelta(seconds=3), asking)
    dead = observe.observe_mm("demo-mm-0", deleting, lapsed, NOW, False)
    assert not dead.alive and dead.lost_reason == "pod deleted"


def _body_of(change: CreatePartition) -> dict[str, Any]:
    """A created Partition as the watch delivers it."""
    return {
        "apiVersion": "hybridmq.io/v1alpha1",
        "kind": "Partition",
        "metadata": {
            "name": change.name,
            "namespace": "ns",
            "resourceVersion": "20",
            "finalizers": ["hybridmq.io/partition-data"],
        },
        "spec": change.spec.model_dump(mode="json", by_alias=True, exclude_none=True),
        "status": change.status.model_dump(mode="json", by_alias=True),
    }


def test_a_replacement_mm_is_not_given_replicas_before_its_process_is_accounted_for() -> None:
    """A deleted MM's replacement pod can be Ready before its Lease reaches the operator. Given
    replicas then, it was taken for a restart as soon as its Lease showed up: the partition it had
    just been given failed over once more (one failover more than the MMs that were lost)."""
    acquired = stamp(NOW - timedelta(seconds=2))
    pods = []
    for i in range(3):
        body = pod(f"demo-mm-{i}", ip=f"127.0.1.{i + 1}")
        body["metadata"]["uid"] = f"uid-{i}"
        pods.append(body)
    pods[0]["metadata"]["uid"] = "uid-replacement"

    def own_lease(i: int, accounted: bool = True) -> dict[str, Any]:
        body = lease(f"demo-mm-{i}", NOW)
        body["spec"]["acquireTime"] = acquired
        body["metadata"]["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": f"demo-mm-{i}", "uid": pods[i]["metadata"]["uid"]}
        ]
        if accounted:
            body["metadata"]["annotations"]["hybridmq.io/accounted-incarnation"] = acquired
        return body

    parts = [
        partition("demo-fixed-0", "demo-mm-1", ["demo-mm-1", "demo-mm-2"]),
        partition("demo-od-a-0", "demo-mm-1", ["demo-mm-1", "demo-mm-2"]),
        partition("demo-od-b-0", "demo-mm-2", ["demo-mm-2", "demo-mm-1"]),
    ]
    for p in parts[1:]:
        p["spec"]["type"] = "on-demand"
    spec = {"partitions": {"fixed": {"count": 1}, "onDemand": {"perMessageManager": 1}}}
    recorded: dict[str, str] = {}
    # Round by round, as the reconcile daemon does: first the replacement's Lease is not in the
    # index yet; then it is, not yet accounted for; then the operator has recorded it.
    failovers = []
    for leases in (
        (own_lease(1), own_lease(2)),
        (own_lease(0, accounted=False), own_lease(1), own_lease(2)),
        (own_lease(0, accounted=False), own_lease(1), own_lease(2)),
        (own_lease(0, accounted=False), own_lease(1), own_lease(2)),
    ):
        snap = observe.Snapshot(
            cluster=cluster(**spec), pods=tuple(pods), leases=leases, partitions=tuple(parts)
        )
        result = plan(observe.cluster_state(snap, NOW, desired_mms=3, recorded=recorded))
        by_name = {p["metadata"]["name"]: p for p in parts}
        for change in result.changes:
            if isinstance(change, CreatePartition):
                parts.append(_body_of(change))
            elif isinstance(change, UpdatePartitionStatus):
                if change.status.last_failover is not None:
                    failovers.append((change.name, change.status.last_failover.reason))
                by_name[change.name]["status"] = change.status.model_dump(mode="json", by_alias=True)
        # What the daemon records at the end of an applied round.
        own = {n: b for n, b in ((b["metadata"]["name"], b) for b in leases)}
        recorded.update(incarnations.unrecorded({p["metadata"]["name"]: p for p in pods}, own))
    assert failovers == []
    # The replacement got its on-demand partition all the same, once accounted for.
    od_primaries = [p["status"]["primary"] for p in parts if p["spec"]["type"] == "on-demand"]
    assert sorted(od_primaries) == ["demo-mm-0", "demo-mm-1", "demo-mm-2"]


def test_failure_domains_come_from_the_mm_pods_nodes_and_reach_the_status() -> None:
    pods = [pod(f"demo-mm-{i}", ip=f"127.0.1.{i + 1}") for i in range(3)]
    for i, p in enumerate(pods):
        p["spec"] = {"nodeName": f"node-{i}"}
    labels = {
        "node-0": {"topology.kubernetes.io/zone": "a"},
        "node-1": {"topology.kubernetes.io/zone": "a"},
        "node-2": {"topology.kubernetes.io/zone": "b"},
    }
    spec = {
        "messageManagers": {"topologyKey": "topology.kubernetes.io/zone"},
        "partitions": {"fixed": {"count": 3}, "onDemand": {"perMessageManager": 0}},
    }
    snap = observe.Snapshot(cluster=cluster(**spec), pods=tuple(pods), leases=(), partitions=())
    state = observe.cluster_state(snap, NOW, desired_mms=3, node_labels=labels)
    assert [m.domain for m in state.message_managers] == ["a", "a", "b"]
    # Each fixed partition gets one replica in zone b, the only other domain.
    creates = [c for c in plan(state).changes if isinstance(c, CreatePartition)]
    assert len(creates) == 3 and all("demo-mm-2" in c.status.replicas for c in creates)
    # An unlabelled or unread node: unknown domain.
    assert observe.failure_domain(pods[0], {"node-0": {}}, "topology.kubernetes.io/zone") is None
    assert observe.failure_domain(pods[0], None, "topology.kubernetes.io/zone") is None

    obs = observe.cluster_observation(state, snap, cm_desired=0, mm_desired=3)
    obs = replace(obs, domain_spread=domain_spread(state))
    status = cluster_status.cluster_status(obs, state, [], {}, 1, NOW, on_demand_expected=False)
    cond = next(c for c in status["conditions"] if c["type"] == "ReplicasSpreadAcrossDomains")
    assert (cond["status"], cond["reason"]) == ("True", "Spread")
