"""The planner's entry points.

``plan(state)`` runs one round: observe reports -> fail over -> evacuate -> place -> spread over
failure domains -> balance primaries -> trim -> create fixed and on-demand partitions -> collect
drained on-demand ones -> emit the changes. Balancing comes before trimming so that a copy added to
receive a primary gets it before surplus copies are removed (see ``balance.py``). It is pure,
level-based and idempotent: planning again on the result of applying a plan changes nothing.
``max_creates`` bounds the Partitions one round creates (a cluster of a thousand partitions is
created over several rounds, so failovers are not stuck behind a long bulk creation).

``apply_changes(state, plan)`` applies a plan to a state the way the operator would (for tests and
for the broker-only local controller), and ``plan_assignments(...)`` is that local controller's
one-call entry point over ``PartitionAssignment``s.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from hybridmq.api.assignment import PartitionAssignment, PartitionState, PartitionType
from hybridmq.api.resources import (
    LABEL_CLUSTER,
    LABEL_PARTITION_TYPE,
    BrokerClusterSpec,
    Partition,
    PartitionSpec,
    PartitionStatus,
    partition_to_assignment,
)
from hybridmq.planner.balance import awaiting_handover, rebalance
from hybridmq.planner.changes import (
    Change,
    CreatePartition,
    DeletePartition,
    MessageManagersEvacuated,
    Plan,
    ReleaseFinalizer,
    UpdatePartitionStatus,
)
from hybridmq.planner.domains import respread
from hybridmq.planner.draft import Context, Draft
from hybridmq.planner.failover import handle_lost_replicas, refresh_offsets
from hybridmq.planner.ondemand import collect_garbage, top_up
from hybridmq.planner.placement import Load, fill_replicas
from hybridmq.planner.scaling import (
    blocked_scale_down,
    create_fixed,
    evacuate,
    safe_to_remove,
    trim_extra,
)
from hybridmq.planner.state import (
    ClusterState,
    MessageManager,
    PartitionInfo,
    ReplicaReport,
    natural_key,
)

__all__ = ["LocalPlan", "apply_changes", "observe", "plan", "plan_assignments"]


def observe(draft: Draft, report: ReplicaReport | None, ctx: Context) -> None:
    """Merge what the MMs reported: the primary's ISR and figures (current epoch only) and each
    replica's own log end offset. The primary always stays in sync."""
    for mm in draft.replicas:
        off = ctx.reported_offset(mm, draft.name)
        if off is not None:
            draft.replica_offsets[mm] = off
    if report is None or draft.primary is None:
        return
    if report.epoch != draft.epoch or report.reporter != draft.primary:
        return  # stale or from a fenced primary
    reported = set(report.in_sync)
    in_sync = [r for r in draft.replicas if r == draft.primary or r in reported]
    if in_sync != draft.in_sync:
        joined = [r for r in in_sync if r not in draft.in_sync]
        left = [r for r in draft.in_sync if r not in in_sync]
        if joined:
            draft.event("ReplicaInSync", f"{', '.join(joined)} caught up with primary {draft.primary}")
        if left:
            draft.event("ReplicaOutOfSync", f"{', '.join(left)} fell behind primary {draft.primary}", True)
        draft.in_sync = in_sync
    for mm, off in report.log_end_offsets.items():
        if mm in draft.replicas:
            draft.replica_offsets[mm] = off
    draft.log_end_offset = report.log_end_offset
    draft.committed_offset = report.committed_offset
    draft.backlog = report.backlog
    draft.producers = report.producers
    draft.reader_lag = report.reader_lag
    draft.reported_epoch = report.epoch
    draft.replica_offsets.setdefault(draft.primary, report.log_end_offset)


def _settle_state(draft: Draft) -> None:
    """Pending -> Active once placed; Migrating -> Active once the replica count is restored.

    Only failover makes a fixed partition Migrating (a lost replica could not be replaced yet); a
    partition created on fewer MMs than its replica count is Active and under-replicated (see its
    UnderReplicated condition). On-demand partitions are never Migrating: they drain instead.
    """
    if draft.deleting or draft.state in (PartitionState.DRAINING, PartitionState.DRAINED):
        return
    if draft.primary is None:
        return
    if draft.state == PartitionState.PENDING:
        draft.state = PartitionState.ACTIVE
    short = len(draft.replicas) < draft.target
    if draft.state == PartitionState.MIGRATING:
        if not short:
            draft.state = PartitionState.ACTIVE
        elif draft.events:
            draft.event(
                "UnderReplicated",
                f"{len(draft.replicas)} of {draft.target} replicas and no message manager to add one",
                warning=True,
            )


def _labels(cluster: str, spec: PartitionSpec) -> dict[str, str]:
    return {
        "app.kubernetes.io/part-of": "hybridmq",
        LABEL_CLUSTER: cluster,
        LABEL_PARTITION_TYPE: spec.type.value,
    }


def plan(state: ClusterState, max_creates: int | None = None) -> Plan:
    """One planning round: state in, changes out (see the module docstring)."""
    if blocked_scale_down(state) is not None:
        # A refused scale-down does not happen: the MMs it would remove keep serving (and may
        # receive replacement replicas after a failure) until the user asks for something possible.
        state = replace(
            state, message_managers=tuple(replace(m, leaving=False) for m in state.message_managers)
        )
    ctx = Context(state)
    drafts = [Draft.from_info(info) for info in state.partitions]
    by_name = {info.name: info for info in state.partitions}
    for d in drafts:
        if not d.deleting:
            observe(d, by_name[d.name].report, ctx)
    load = Load.of(drafts, ctx.eligible, ctx.domains)
    for d in drafts:
        handle_lost_replicas(d, ctx, load)
    for d in drafts:
        evacuate(d, ctx, load)
    for d in drafts:
        fill_replicas(d, ctx, load)
    respread(drafts, ctx, load)
    rebalance(drafts, ctx, load, {name: info.report for name, info in by_name.items()})
    waiting = awaiting_handover(drafts, ctx)
    for d in drafts:
        trim_extra(d, ctx, load, waiting)
    created = create_fixed(ctx, (d.name for d in drafts), load, max_creates)
    on_demand = top_up(ctx, [*drafts, *created], load)
    # Cut after the fact: top_up's extra load bookkeeping only skews this round's placement.
    created += on_demand if max_creates is None else on_demand[: max(0, max_creates - len(created))]

    changes: list[Change] = []
    deletes: list[Change] = []
    offline: list[str] = []
    for d in drafts:
        delete, release = collect_garbage(d, ctx)
        if release:
            deletes.append(
                ReleaseFinalizer(
                    d.name, "DataDeleted", "no message manager holds the partition's data any more"
                )
            )
            continue
        if d.deleting:
            continue
        _settle_state(d)
        refresh_offsets(d, ctx, d.replicas)  # replicas placed this round may have reported already
        if d.placed and d.primary is None and d.state != PartitionState.DRAINED:
            offline.append(d.name)
        status = d.to_status(ctx.now)
        if status != d.original:
            first = d.events[0] if d.events else None
            changes.append(
                UpdatePartitionStatus(
                    name=d.name,
                    status=status,
                    reason=first.reason if first else "StatusObserved",
                    message="; ".join(e.message for e in d.events) or "reported figures updated",
                    events=tuple(d.events),
                )
            )
        if delete:
            deletes.append(
                DeletePartition(
                    d.name, "PartitionDeleted", "drained on-demand partition: empty past its retention"
                )
            )
    for d in created:
        _settle_state(d)
        first = d.events[0] if d.events else None
        changes.append(
            CreatePartition(
                name=d.name,
                spec=d.spec,
                status=d.to_status(ctx.now),
                labels=_labels(ctx.cluster, d.spec),
                reason="PartitionCreated",
                message=f"{d.spec.type.value} partition created"
                + (f": {first.message}" if first else " (no message manager available yet)"),
            )
        )
    changes.extend(deletes)
    removable, evacuating = safe_to_remove(ctx, [*drafts, *created])
    if removable:
        names = tuple(sorted(removable, key=natural_key))
        changes.append(
            MessageManagersEvacuated(
                names, "Evacuated", f"{', '.join(names)} hold no replica any more and may be removed"
            )
        )
    return Plan(
        changes=tuple(changes),
        safe_to_remove=removable,
        evacuating=evacuating,
        offline=tuple(offline),
    )


def apply_changes(state: ClusterState, changes: Iterable[Change]) -> ClusterState:
    """The state after the operator applied ``changes`` (reports are consumed: set to None).

    DeletePartition marks the partition deleting (its finalizer keeps it); ReleaseFinalizer removes
    it. MessageManagersEvacuated changes nothing here (the handler scales the StatefulSet down).
    """
    infos: dict[str, PartitionInfo] = {p.name: replace(p, report=None) for p in state.partitions}
    for change in changes:
        if isinstance(change, CreatePartition):
            infos[change.name] = PartitionInfo(
                name=change.name, spec=change.spec, status=change.status, generation=1
            )
        elif isinstance(change, UpdatePartitionStatus):
            infos[change.name] = replace(infos[change.name], status=change.status)
        elif isinstance(change, DeletePartition):
            info = infos[change.name]
            if info.finalizers:
                infos[change.name] = replace(info, deleting=True)
            else:
                del infos[change.name]
        elif isinstance(change, ReleaseFinalizer):
            info = infos[change.name]
            finalizers = tuple(f for f in info.finalizers if f != change.finalizer)
            if info.deleting and not finalizers:
                del infos[change.name]
            else:
                infos[change.name] = replace(info, finalizers=finalizers)
    return replace(state, partitions=tuple(infos.values()))


@dataclass(frozen=True, slots=True)
class LocalPlan:
    """What the broker-only local controller gets back."""

    assignments: tuple[PartitionAssignment, ...]
    plan: Plan


def _status_from_assignment(a: PartitionAssignment) -> PartitionStatus:
    return PartitionStatus(
        state=a.state,
        epoch=a.epoch,
        primary=a.primary,
        replicas=list(a.replicas),
        in_sync=list(a.in_sync),
        accept_writes=a.accept_writes,
        drained_since=a.drained_since,
    )


def plan_assignments(
    assignments: Sequence[PartitionAssignment],
    live_mms: Collection[str],
    *,
    cluster: str = "local",
    spec: BrokerClusterSpec | None = None,
    reports: Mapping[str, ReplicaReport] | None = None,
    leaving: Collection[str] = (),
    stopping: Collection[str] = (),
    now: datetime | None = None,
) -> LocalPlan:
    """Plan for a broker-only cluster (``hybridmq local``): no Kubernetes, no finalizers.

    ``assignments`` is the current table (empty at start), ``live_mms`` the MMs that are up (any MM
    named in an assignment but not live is lost), ``reports`` the primaries' reports (needed for
    in-sync changes and for draining on-demand partitions to be collected), ``stopping`` the live
    MMs that asked for a graceful handoff (see ``scaling.evacuate``). Returns the new table
    (drained on-demand partitions removed) and the plan, whose events the caller may log.
    """
    spec = spec or BrokerClusterSpec()
    now = now or datetime.now(UTC)
    reports = reports or {}
    leaving_set, stopping_set = set(leaving), set(stopping)
    mms = tuple(
        MessageManager(name=m, leaving=m in leaving_set, stopping=m in stopping_set)
        for m in sorted(live_mms, key=natural_key)
    )
    min_in_sync = {a.name: a.min_in_sync for a in assignments}
    targets = {
        PartitionType.FIXED: spec.partitions.fixed.replicas,
        PartitionType.ON_DEMAND: spec.partitions.on_demand.replicas,
    }
    # The target replica count comes from the cluster spec, not from the (maybe shrunk) replica list.
    infos = tuple(
        PartitionInfo(
            name=a.name,
            spec=PartitionSpec(cluster=cluster, type=a.type, replicas=targets[a.type]),
            status=_status_from_assignment(a),
            finalizers=(),
            report=reports.get(a.name),
        )
        for a in assignments
    )
    state = ClusterState(cluster=cluster, spec=spec, message_managers=mms, partitions=infos, now=now)
    result = plan(state)
    after = apply_changes(state, result.changes)
    out = []
    for info in after.partitions:
        if info.deleting:
            continue
        resource = Partition.model_validate(
            {"metadata": {"name": info.name}, "spec": info.spec, "status": info.status}
        )
        mis = min_in_sync.get(info.name) or info.spec.min_in_sync
        out.append(partition_to_assignment(resource, min_in_sync=mis))
    out.sort(key=lambda a: natural_key(a.name))
    # Figures-only status updates mean nothing to the broker's table: leave them out.
    meaningful = tuple(
        c for c in result.changes if not (isinstance(c, UpdatePartitionStatus) and not c.events)
    )
    return LocalPlan(assignments=tuple(out), plan=replace(result, changes=meaningful))
