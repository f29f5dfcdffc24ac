"""From what the watches hold (raw pod, Lease and Partition bodies) to the planner's input.

Pure functions, unit tested without Kubernetes. An MM is *lost* when:

* its pod is gone, is being deleted, has failed, or its container is not running
  (terminated, or waiting after a restart);
* its Lease (named after the pod) was renewed once and has expired
  (``renewTime + leaseDurationSeconds`` is in the past);
* its Lease shows an MM process the operator has not accounted for yet while a Partition still
  names the MM (``incarnations``): a restarted MM lost what it held in memory, so it is treated as
  lost until that failover is applied, and returns as a backup;
* a Partition names it but its Lease, which the operator had seen, is gone;
* a Partition names it but its pod holds no Lease of its own and has not started, or the Lease
  under its name belongs to an earlier pod: the pod was replaced (say force-deleted, and the
  StatefulSet's same-name replacement is Pending on a node that stopped answering, or already runs
  while the old pod's Lease is still there), so whatever the old pod held is gone.

An MM whose process the operator has not accounted for yet (no Lease of its own in the index, or
one whose incarnation is not recorded) gets no new replicas: a replacement pod is often Ready
before its Lease reaches the watch, and replicas given to it then made its first Lease look like a
restart, failing over what it had just been given.

A Lease owned by another pod UID (an earlier pod of the same name) is ignored. A pod that never
created a Lease is otherwise judged by its pod alone, so brokers without Lease support still work.

Plain readiness-probe failures do not fail an MM over (a catching-up MM may be unready); they only
keep new replicas away from it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import ValidationError

from hybridmq.api.lease_report import REPORT_ANNOTATION, MMReport
from hybridmq.api.resources import BrokerCluster, PartitionSpec, PartitionState, PartitionStatus
from hybridmq.planner.scaling import required_in_sync
from hybridmq.planner.state import ClusterState, MessageManager, PartitionInfo, ReplicaReport
from hybridmq_operator import incarnations, names
from hybridmq_operator.conditions import ClusterObservation, PartitionObservation

Body = Mapping[str, Any]

# The last report parsed from each MM's Lease, with its text. A report names every partition its
# MM holds: parsing each one twice a round, four rounds a second, was a sixth of the operator's CPU
# at 1,000 partitions, while most rounds see the same text.
_reports: dict[tuple[str, str], tuple[str | None, MMReport | None]] = {}
REPORTS_KEPT = 4096  # Leases; a bound for the Leases of deleted clusters


def parse_time(value: Any) -> datetime | None:
    if not value:
        return None
    text = str(value).replace("Z", "+00:00")
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _meta(body: Body) -> Mapping[str, Any]:
    return body.get("metadata") or {}


def pod_ready(pod: Body) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def pod_failure(pod: Body) -> str | None:
    """Why a pod counts as lost, or None while it may be serving."""
    if _meta(pod).get("deletionTimestamp"):
        return "pod deleted"
    status = pod.get("status") or {}
    if status.get("phase") in ("Failed", "Succeeded"):
        return f"pod {str(status['phase']).lower()}"
    for cs in status.get("containerStatuses") or []:
        state = cs.get("state") or {}
        if "terminated" in state:
            return "container terminated"
        # Waiting after an exit (restarted before, or its last state says it ended: the first
        # crash, during its restart back-off): the process that held the partitions is gone.
        crashed = int(cs.get("restartCount") or 0) > 0 or "terminated" in (cs.get("lastState") or {})
        if "waiting" in state and crashed:
            return f"container restarting ({state['waiting'].get('reason') or 'waiting'})"
    return None


def lease_expiry(lease: Body, watching_since: datetime | None = None) -> datetime | None:
    """When the Lease runs out: its renewal plus its duration - but never within one duration of
    ``watching_since``, the moment this operator's view of the Leases began (its first round).

    A standby taking over (or a restarted operator) lists every watched resource at once: its
    Leases may be the first thing listed and their renewals queued behind a long pod listing, so
    its first rounds see renewal times older than a 1 s Lease although every MM renews. Like a
    Kubernetes leader-election candidate, a new observer gives each Lease one full duration of its
    own watching before it calls it over; a dead MM is found one duration after the takeover."""
    spec = lease.get("spec") or {}
    renewed = parse_time(spec.get("renewTime"))
    if renewed is None:
        return None
    duration = timedelta(seconds=float(spec.get("leaseDurationSeconds") or 1))
    if watching_since is not None:
        renewed = max(renewed, watching_since)
    return renewed + duration


def lease_acquired(lease: Body) -> datetime | None:
    return parse_time((lease.get("spec") or {}).get("acquireTime"))


def container_running(pod: Body) -> bool:
    """Some container of the pod runs (a replacement pod on a node that stopped answering never does)."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return any("running" in (cs.get("state") or {}) for cs in statuses)


def lease_report(lease: Body | None) -> MMReport | None:
    """The MM's report on its Lease (read-only: a parsed report is shared between rounds)."""
    if lease is None:
        return None
    meta = _meta(lease)
    text = (meta.get("annotations") or {}).get(REPORT_ANNOTATION)
    key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
    cached = _reports.get(key)
    if cached is not None and cached[0] == text:
        return cached[1]
    if len(_reports) >= REPORTS_KEPT:
        _reports.clear()
    report = MMReport.from_annotation(text)
    _reports[key] = (text, report)
    return report


def observe_mm(
    name: str,
    pod: Body | None,
    lease: Body | None,
    now: datetime,
    leaving: bool,
    first_seen_lost: Mapping[str, datetime] | None = None,
    restarted: bool = False,
    holds_replicas: bool = False,
    replaced: bool = False,
    had_lease: bool = False,
    accounted: bool = True,
    domain: str | None = None,
    roll_marked: bool = False,
    watching_since: datetime | None = None,
) -> MessageManager:
    """One MM as the planner sees it. ``first_seen_lost`` remembers losses without a timestamp;
    ``lease`` must be the pod's own (``incarnations.own_lease``); ``holds_replicas``: a Partition
    names the MM; ``replaced``: the Lease under its name belongs to an earlier pod; ``had_lease``:
    the operator accounted for a Lease of this pod before; ``accounted``: the operator knows the
    process behind the pod (``incarnations.known``), else the MM gets no new replicas;
    ``roll_marked``: the roll chose this MM next (``marked_for_roll``): while alive it counts as
    stopping, so its replicas move away before the roll deletes its pod; ``watching_since``: see
    ``lease_expiry``."""
    reason: str | None = None
    since: datetime | None = None
    if pod is None:
        reason = "pod deleted"
    else:
        reason = pod_failure(pod)
        if reason == "pod deleted":
            grace = float(_meta(pod).get("deletionGracePeriodSeconds") or 0)
            deleted_at = parse_time(_meta(pod).get("deletionTimestamp"))
            since = deleted_at - timedelta(seconds=grace) if deleted_at else None
    expiry = lease_expiry(lease, watching_since) if lease is not None else None
    report = lease_report(lease)
    stopping = False
    if (
        reason == "pod deleted"
        and report is not None
        and report.stopping
        and expiry is not None
        and expiry > now
        and not restarted
    ):
        # A planned stop (deletion, roll, drain): the MM got SIGTERM, still renews its Lease and
        # asks for a graceful handoff. Its replicas move away before it exits; if it dies first,
        # its Lease lapses and the normal failover follows.
        reason, since, stopping = None, None, True
    if reason is None and expiry is not None and expiry <= now:
        reason, since = "lease expired", expiry
    if reason is None and restarted:
        # A new MM process behind the same name: what the old one held in memory is gone.
        reason, since = "message manager restarted", lease_acquired(lease) if lease else None
    if reason is None and roll_marked:
        stopping = True
    started = pod is not None and container_running(pod)
    if reason is None and holds_replicas and lease is None and (replaced or not started):
        # Not the process the partitions were assigned to: that one went with the old pod.
        reason = "pod replaced"
    if reason is None and holds_replicas and lease is None and had_lease:
        reason = "lease lost"
    stopping = stopping and reason is None
    seen = first_seen_lost.get(name) if first_seen_lost is not None else None
    # Timestamps in metadata have a 1 s resolution; our own sighting is sharper when it is close.
    if (
        reason is not None
        and seen is not None
        and (since is None or timedelta(0) <= seen - since <= timedelta(seconds=1.5))
    ):
        since = seen
    offsets = {p: r.log_end_offset for p, r in report.partitions.items()} if report else {}
    return MessageManager(
        name=name,
        alive=reason is None,
        ready=reason is None and pod is not None and pod_ready(pod),
        leaving=leaving,
        stopping=stopping,
        lost_reason=reason,
        lost_since=since if reason is not None else None,
        log_end_offsets=offsets,
        stored=frozenset(report.partitions) if report is not None else None,
        accounted=accounted,
        domain=domain,
    )


def marked_for_roll(pod: Body | None) -> bool:
    """The roll chose this MM pod next: its replicas move off before it is deleted."""
    annotations = _meta(pod or {}).get("annotations") or {}
    return annotations.get(names.ANNOTATION_ROLL) == names.ROLL_MOVING_REPLICAS


def partition_view(body: Body) -> PartitionInfo | None:
    """A Partition resource as the planner reads it, without a report (None: not a valid Partition).

    Only the spec and status become models: the planner reads four fields of the metadata, and a
    parsed ``ObjectMeta`` kept for each of 10,000 Partitions was tens of megabytes.
    """
    meta = _meta(body)
    name = meta.get("name")
    generation = meta.get("generation")
    finalizers = meta.get("finalizers") or []
    if not isinstance(name, str) or not name or not isinstance(finalizers, list):
        return None
    try:
        spec = PartitionSpec.model_validate(body.get("spec"))
        raw_status = body.get("status")
        status = None if raw_status is None else PartitionStatus.model_validate(raw_status)
    except ValidationError:
        return None
    return PartitionInfo(
        name=name,
        spec=spec,
        status=status,
        deleting=meta.get("deletionTimestamp") is not None,
        finalizers=tuple(str(f) for f in finalizers),
        generation=generation if isinstance(generation, int) else None,
    )


class PartitionCache:
    """Partition views by (name, resourceVersion, epoch): a round re-parses only what changed
    (the epoch too: a body seen through the assignment map keeps its resourceVersion). It also
    keeps each partition's view with its primary's report (``infos``), made again only when the
    Partition or a report changed."""

    def __init__(self) -> None:
        self._items: dict[str, tuple[str, PartitionInfo | None]] = {}
        # The last round's view of each partition with its report, and the view it was made from,
        # and the reports it was made with (kept, so that identities stay unique).
        self._infos: dict[str, tuple[PartitionInfo, PartitionInfo]] = {}
        self._reports: tuple[tuple[str, MMReport], ...] = ()

    def infos(
        self, parsed: Iterable[PartitionInfo], reports: Mapping[str, MMReport]
    ) -> tuple[PartitionInfo, ...]:
        """Each partition with the primary's report about it; made again only for a partition
        whose resource changed, or when any report did (a report is one object per text)."""
        current = tuple(reports.items())
        same_reports = len(current) == len(self._reports) and all(
            m == n and r is q for (m, r), (n, q) in zip(current, self._reports, strict=True)
        )
        kept = self._infos if same_reports else {}
        out: dict[str, tuple[PartitionInfo, PartitionInfo]] = {}
        for view in parsed:
            known = kept.get(view.name)
            if known is None or known[0] is not view:
                report = replica_report(view, reports)
                known = (view, view if report is None else replace(view, report=report))
            out[view.name] = known
        self._infos, self._reports = out, current
        return tuple(info for _, info in out.values())

    def parse(self, bodies: Iterable[Body]) -> list[PartitionInfo]:
        out: list[PartitionInfo] = []
        seen: set[str] = set()
        for body in bodies:
            meta = _meta(body)
            name, rv = str(meta.get("name")), str(meta.get("resourceVersion") or "")
            if rv:
                rv += f"/{(body.get('status') or {}).get('epoch')}"
            seen.add(name)
            cached = self._items.get(name)
            if cached is None or cached[0] != rv or not rv:
                cached = (rv, partition_view(body))
                self._items[name] = cached
            if cached[1] is not None:
                out.append(cached[1])
        for name in set(self._items) - seen:
            del self._items[name]
        return out


def replica_report(partition: PartitionInfo, reports: Mapping[str, MMReport]) -> ReplicaReport | None:
    """The primary's report about a partition, with every replica's log end offset."""
    name = partition.name
    primary = partition.status.primary if partition.status else None
    if primary is None or primary not in reports:
        return None
    own = reports[primary].partitions.get(name)
    if own is None or own.role != "primary":
        return None
    offsets = {mm: r.partitions[name].log_end_offset for mm, r in reports.items() if name in r.partitions}
    return ReplicaReport(
        reporter=primary,
        epoch=own.epoch,
        in_sync=tuple(own.in_sync),
        log_end_offsets=offsets,
        log_end_offset=own.log_end_offset,
        committed_offset=own.committed_offset,
        backlog=own.backlog,
        producers=own.producers,
        reader_lag=own.reader_lag,
    )


@dataclass(frozen=True)
class Snapshot:
    """A cluster's pods, Leases and Partitions, as the indexes held them at one instant."""

    cluster: Body
    pods: tuple[Body, ...]
    leases: tuple[Body, ...]
    partitions: tuple[Body, ...]

    @property
    def name(self) -> str:
        return str(_meta(self.cluster).get("name"))

    def pods_of(self, role: str) -> dict[str, Body]:
        return {
            str(_meta(p)["name"]): p
            for p in self.pods
            if (_meta(p).get("labels") or {}).get(names.LABEL_ROLE) == role
        }

    def leases_by_name(self) -> dict[str, Body]:
        return {str(_meta(lease)["name"]): lease for lease in self.leases}


def node_of(pod: Body | None) -> str | None:
    """The node a pod is scheduled to (None: not yet)."""
    return ((pod or {}).get("spec") or {}).get("nodeName") or None


def failure_domain(
    pod: Body | None, node_labels: Mapping[str, Mapping[str, str]] | None, topology_key: str
) -> str | None:
    """The value of ``topology_key`` on the pod's node (None: not scheduled, node not read, or the
    node lacks the label)."""
    node = node_of(pod)
    if node is None or not node_labels:
        return None
    return (node_labels.get(node) or {}).get(topology_key)


def mm_names(snapshot: Snapshot, partitions: Iterable[PartitionInfo]) -> list[str]:
    """Every MM the cluster knows of: pods, and MMs still named by a partition's status.

    Leases alone do not count: an MM's Lease is owned by its pod and goes with it.
    """
    known = set(snapshot.pods_of(names.ROLE_MM))
    for p in partitions:
        if p.status is not None:
            known.update(p.status.replicas)
    return sorted(known, key=names.pod_ordinal)


def cluster_state(
    snapshot: Snapshot,
    now: datetime,
    desired_mms: int,
    first_seen_lost: Mapping[str, datetime] | None = None,
    restarted: frozenset[str] = frozenset(),
    cache: PartitionCache | None = None,
    recorded: Mapping[str, str] | None = None,
    node_labels: Mapping[str, Mapping[str, str]] | None = None,
    watching_since: datetime | None = None,
) -> ClusterState:
    """``recorded``: incarnations the operator wrote on Leases that the watch has not delivered;
    ``node_labels``: labels of the nodes the MM pods run on (their failure domains);
    ``watching_since``: the first round of this operator (see ``lease_expiry``)."""
    cluster = BrokerCluster.model_validate(dict(snapshot.cluster))
    cache = cache or PartitionCache()
    parsed = cache.parse(snapshot.partitions)
    parsed = [p for p in parsed if p.spec.cluster == snapshot.name]
    pods = snapshot.pods_of(names.ROLE_MM)
    all_leases = snapshot.leases_by_name()
    leases = {n: lease for n, lease in all_leases.items() if incarnations.own_lease(pods.get(n), lease)}
    named = incarnations.referenced(parsed)
    restarted = restarted | incarnations.restarted(pods, leases, named, recorded)
    mms = tuple(
        observe_mm(
            mm,
            pods.get(mm),
            leases.get(mm),
            now,
            leaving=names.pod_ordinal(mm) >= desired_mms,
            first_seen_lost=first_seen_lost,
            restarted=mm in restarted,
            holds_replicas=mm in named,
            replaced=incarnations.stale_lease(pods.get(mm), all_leases.get(mm)),
            had_lease=recorded is not None and mm in recorded,
            # Brokers that renew Leases (any MM shows one): a pod is known by its own Lease only.
            accounted=incarnations.known(leases.get(mm), recorded, mm) if all_leases else True,
            domain=failure_domain(pods.get(mm), node_labels, cluster.spec.message_managers.topology_key),
            roll_marked=marked_for_roll(pods.get(mm)),
            watching_since=watching_since,
        )
        for mm in mm_names(snapshot, parsed)
    )
    reports = {
        m: r for m in (x.name for x in mms if x.alive) if (r := lease_report(leases.get(m))) is not None
    }
    infos = cache.infos(parsed, reports)
    return ClusterState(
        cluster=snapshot.name, spec=cluster.spec, message_managers=mms, partitions=infos, now=now
    )


def broker_table(snapshot: Snapshot) -> list[dict[str, Any]]:
    """``status.brokers``: every broker pod with an IP, CMs first, in ordinal order."""
    rows: list[dict[str, Any]] = []
    for role, port in ((names.ROLE_CM, names.CM_CLIENT_PORT), (names.ROLE_MM, names.MM_PORT)):
        for name, pod in sorted(snapshot.pods_of(role).items(), key=lambda kv: names.pod_ordinal(kv[0])):
            ip = (pod.get("status") or {}).get("podIP")
            if not ip or _meta(pod).get("deletionTimestamp"):
                continue
            rows.append(
                {
                    "name": name,
                    "role": role,
                    "address": f"{ip}:{port}",
                    "httpAddress": f"{ip}:{names.HTTP_PORT}",
                    "ready": pod_ready(pod) and pod_failure(pod) is None,
                }
            )
    return rows


def cluster_observation(
    state: ClusterState, snapshot: Snapshot, cm_desired: int, mm_desired: int
) -> ClusterObservation:
    cms = snapshot.pods_of(names.ROLE_CM)
    cm_ready = sum(1 for p in cms.values() if pod_ready(p) and pod_failure(p) is None)
    mm_ready = sum(1 for m in state.message_managers if m.ready)
    parts = []
    for info in state.partitions:
        st = info.status
        parts.append(
            PartitionObservation(
                name=info.name,
                type=str(info.spec.type.value),
                state=str((st.state if st else PartitionState.PENDING).value),
                primary=st.primary if st else None,
                replicas=tuple(st.replicas) if st else (),
                in_sync=tuple(st.in_sync) if st else (),
                desired_replicas=info.spec.replicas,
                accept_writes=st.accept_writes if st else True,
                min_in_sync=required_in_sync(info.spec, state.spec),
            )
        )
    return ClusterObservation(
        cm_desired=cm_desired,
        cm_ready=cm_ready,
        mm_desired=mm_desired,
        mm_ready=mm_ready,
        partitions=tuple(parts),
        lost_mms=frozenset(m.name for m in state.message_managers if not m.alive),
        live_mms=frozenset(m.name for m in state.message_managers if m.alive),
    )
