"""The reconcile daemon: one per BrokerCluster, every ~250 ms or as soon as a broker pod changes
(on a settled cluster, only when a watch event or the earliest Lease's end calls for a round).

Each round reads the indexes (pods, MM Leases, Partitions; no API calls), builds the planner's
state, calls the pure planner and applies its changes (in a worker thread). It is level-based:
an operator restarted in the middle of a failover simply plans again from the resources and
finishes it. Besides partitions it finishes MM scale-downs once the planner says the leaving MMs
are evacuated (``scale_down``), and writes the BrokerCluster status when it changed (``status``).
A round that would read what the last one read, on a cluster at rest, is skipped (``quiet``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, cast

import kopf

from hybridmq.api.assignment_map import pending
from hybridmq.api.resources import FailoverRecord, PartitionStatus
from hybridmq.planner import (
    DeletePartition,
    MessageManager,
    Plan,
    ReleaseFinalizer,
    UpdatePartitionStatus,
    commit,
    decision_shape,
    figures,
    plan,
)
from hybridmq_operator import (
    failover_history,
    incarnations,
    index_sync,
    kube,
    memory,
    metrics,
    names,
    observe,
    quiet,
)
from hybridmq_operator.apply import Outcome, apply_plan, status_json, writer_pool
from hybridmq_operator.assignment_map import MapStore, MapTooLarge
from hybridmq_operator.handlers import indexes
from hybridmq_operator.handlers.roll import RollReporter, reconcile_roll
from hybridmq_operator.handlers.scale_down import reconcile_scale_down
from hybridmq_operator.handlers.status import StatusWriter, cluster_ref
from hybridmq_operator.nodes import NodeLabels
from hybridmq_operator.settings import ClusterSettings

INTERVAL_S = 0.25
ERROR_BACKOFF_S = 1.0
INITIAL_WAIT_S = 60.0
FULL_PLAN_EVERY_S = 5.0
# Partitions one round creates at most: a large count is created over several rounds, while
# failovers and status keep being handled in between.
MAX_CREATES_PER_ROUND = 100


def _mm_shape(m: MessageManager) -> MessageManager:
    """An MM without its moving offsets (which partitions it holds still counts)."""
    return replace(m, log_end_offsets=dict.fromkeys(m.log_end_offsets, 0))


def _seen(body: Mapping[str, Any]) -> commit.Seen:
    meta, status = body.get("metadata") or {}, body.get("status") or {}
    return commit.Seen(
        uid=str(meta.get("uid") or ""),
        epoch=int(status.get("epoch") or 0),
        resource_version=str(meta.get("resourceVersion") or ""),
        in_sync=frozenset(status.get("inSync") or ()),
    )


def _rv(body: Mapping[str, Any]) -> int:
    try:
        return int((body.get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


class Reconciler:
    """State kept between rounds (all of it rebuildable: losing it costs nothing but a round)."""

    def __init__(self, name: str, namespace: str) -> None:
        self.name = name
        self.namespace = namespace
        # Bodies we wrote that the watch has not delivered yet (read-your-writes between rounds).
        self.written: dict[str, dict[str, Any]] = {}
        self.deleted: dict[str, float] = {}
        self.first_seen_lost: dict[str, datetime] = {}
        self.watching_since: datetime | None = None  # the first round (see observe.lease_expiry)
        self.status = StatusWriter(name, namespace)
        # Incarnations this operator recorded on Leases (the watch may not have delivered them yet),
        # and on which Lease (uid): a re-created Lease needs the record again.
        self.recorded: dict[str, str] = {}
        self.recorded_on: dict[str, str] = {}
        self.cache = observe.PartitionCache()
        self.pool = writer_pool(f"{namespace}/{name}")
        self.fingerprint: Any = None
        self.planned_at = 0.0
        self.nodes = NodeLabels()
        self.first_seen_stopping: dict[str, datetime] = {}
        self.failovers: list[dict[str, Any]] | None = None  # status.failovers; None: read the body's
        # The assignment map, and the Partitions it is ahead of (their statuses still to follow).
        self.map = MapStore(name, namespace)
        self.behind: dict[str, PartitionStatus] = {}
        # The last round's Partitions as written (before the map's overlay): what says whether an
        # entry of the map is still ahead of its Partition.
        self.as_written: dict[str, dict[str, Any]] = {}
        # When each Partition's status was last written (time.monotonic()): figure-only updates
        # wait their turn (``hybridmq.planner.figures``).
        self.status_written: dict[str, float] = {}
        # The last plan held figure-only updates back: they fall due by time alone, so the cluster
        # is not settled until a plan holds none (rounds that skip planning keep the flag).
        self.figures_held = False
        self.roll = RollReporter()
        self.statefulsets_index: kopf.Index[indexes.Key, Any] | None = None
        self.quiet = quiet.QuietRounds()
        self.bursts = memory.AfterBursts()

    def record_failovers(
        self, body: Mapping[str, Any], state: Any, records: list[tuple[str, FailoverRecord]], now: datetime
    ) -> None:
        """Add this round's primary changes to the failover history; metrics for what completed."""
        before = self.failovers
        if before is None:
            before = list((body.get("status") or {}).get("failovers") or [])
        led = failover_history.still_led((info.status for info in state.partitions), records)
        after = failover_history.record_round(before, records, now, self.first_seen_stopping, led)
        for entry in failover_history.completed_in(before, after):
            metrics.CLUSTER_FAILOVER_SECONDS.labels(self.name, entry.kind).observe(
                entry.duration_seconds or 0.0
            )
        handoffs = sum(1 for _, r in records if failover_history.kind_of(r) == "handoff")
        if handoffs:
            metrics.HANDOFFS.labels(self.name).inc(handoffs)
        self.failovers = after

    def unchanged(self, state: Any, settings: ClusterSettings) -> bool:
        """Nothing the planner reads changed since the last plan (and it is not time for a full
        one): skip planning. Saves the CPU of re-planning thousands of partitions every round."""
        fingerprint = (
            settings,
            tuple(_mm_shape(m) for m in state.message_managers),
            tuple(
                (p.name, p.status, p.deleting, tuple(p.finalizers), decision_shape(p.report))
                for p in state.partitions
            ),
        )
        now = time.monotonic()
        if fingerprint == self.fingerprint and now - self.planned_at < FULL_PLAN_EVERY_S:
            return True
        self.fingerprint, self.planned_at = fingerprint, now
        return False

    def partitions(self, indexed: tuple[dict[str, Any], ...]) -> tuple[dict[str, Any], ...]:
        by_name = {str(b["metadata"]["name"]): b for b in indexed}
        for name, body in list(self.written.items()):
            seen = by_name.get(name)
            if seen is not None and _rv(seen) >= _rv(body):
                del self.written[name]
            elif name not in self.deleted:
                by_name[name] = body
        now = time.monotonic()
        for name, at in list(self.deleted.items()):
            if name not in by_name or now - at > 30:
                self.deleted.pop(name, None)
        self.as_written = by_name
        return tuple(self._overlay_map(by_name).values())

    def _overlay_map(self, by_name: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """Partitions the assignment map is ahead of are planned as the map has them (cheap when
        they caught up: one epoch comparison each). ``by_name`` is left as written: a copy is made
        only when the map is ahead of some Partition."""
        observed: dict[str, commit.Observed] = {}
        for name, entry in self.map.entries.items():
            body = by_name.get(name)
            if body is None:
                continue
            seen = _seen(body)
            # ``commit.overlay`` decides; this only spares parsing the statuses that caught up.
            if pending(entry, seen.uid, seen.epoch, seen.in_sync):
                observed[name] = (seen, PartitionStatus.model_validate(body.get("status") or {}))
        self.behind = commit.overlay(observed, self.map.entries)
        if not self.behind:
            return by_name
        overlaid = dict(by_name)
        for name, status in self.behind.items():
            overlaid[name] = {**by_name[name], "status": status_json(status)}
        return overlaid

    def remember(self, outcome: Outcome) -> None:
        self.written.update(outcome.written)
        for name in outcome.deleted:
            self.deleted[name] = time.monotonic()

    def track_losses(self, state: Any, now: datetime) -> None:
        stopping = {m.name for m in state.message_managers if m.alive and m.stopping}
        for name in stopping:
            self.first_seen_stopping.setdefault(name, now)
        for name in list(self.first_seen_stopping):
            if name not in stopping:
                del self.first_seen_stopping[name]
        lost = {m.name for m in state.message_managers if not m.alive}
        for name in lost:
            self.first_seen_lost.setdefault(name, now)
        for name in list(self.first_seen_lost):
            if name not in lost:
                del self.first_seen_lost[name]


def _record_incarnations(rec: Reconciler, snapshot: observe.Snapshot) -> None:
    """Note on each MM Lease the process this round accounted for (see ``incarnations``)."""
    pods, leases = snapshot.pods_of(names.ROLE_MM), snapshot.leases_by_name()
    for name, inc in incarnations.unrecorded(pods, leases).items():
        uid = str((leases[name].get("metadata") or {}).get("uid") or "")
        if rec.recorded.get(name) == inc and rec.recorded_on.get(name) == uid:
            continue
        patch = {"metadata": {"annotations": {incarnations.ANNOTATION: inc}}}
        try:
            kube.merge_patch("coordination.k8s.io/v1", "Lease", rec.namespace, name, patch)
        except kube.KubeError as exc:
            if not exc.not_found:
                raise
        rec.recorded[name], rec.recorded_on[name] = inc, uid
    for name in set(rec.recorded) - set(pods):
        del rec.recorded[name], rec.recorded_on[name]


def _count_changes(cluster: str, p: Plan) -> None:
    for change in p.changes:
        metrics.CHANGES.labels(cluster, type(change).__name__).inc()
        if isinstance(change, DeletePartition):
            metrics.GARBAGE_COLLECTED.labels(cluster).inc()


def failover_summary(records: list[tuple[str, FailoverRecord]]) -> tuple[str, str]:
    """(reason, message) of the BrokerCluster Event about one round's failovers."""
    moved = sorted((r for r in records if r[1].to is not None), key=lambda r: r[0])
    offline = sorted(n for n, r in records if r.to is None)
    parts = []
    if moved:
        shown = ", ".join(f"{n} {r.from_ or 'none'} -> {r.to} ({r.reason})" for n, r in moved[:5])
        parts.append(f"{len(moved)} partitions failed over: {shown}" + (" …" if len(moved) > 5 else ""))
    if offline:
        shown = ", ".join(offline[:5]) + (" …" if len(offline) > 5 else "")
        parts.append(f"{len(offline)} partitions offline (no in-sync replica alive): {shown}")
    return ("FailedOver" if moved else "PartitionsOffline"), "; ".join(parts)


def waiting_for_initial_mms(
    snapshot: observe.Snapshot, state: Any, settings: ClusterSettings, now: datetime
) -> bool:
    """A new cluster waits (up to ``INITIAL_WAIT_S``) for all its MMs before the first placement,
    so that the first partitions spread over every MM instead of the first one to be ready (and
    whose process the operator has accounted for: only those receive replicas)."""
    if snapshot.partitions:
        return False
    ready = sum(1 for m in state.message_managers if m.ready and m.accounted)
    created = observe.parse_time((snapshot.cluster.get("metadata") or {}).get("creationTimestamp"))
    young = created is not None and (now - created).total_seconds() < INITIAL_WAIT_S
    return ready < settings.mm_replicas and young


def _post_events(outcome: Outcome) -> None:
    for ref, event in outcome.events:
        kopf.event(
            kopf.Body(cast(kopf.RawBody, ref)), type=event.type, reason=event.reason, message=event.message
        )


async def _commit_primaries(
    rec: Reconciler,
    settings: ClusterSettings,
    result: Plan,
    logger: Any,
) -> frozenset[str]:
    """The round's primary changes and in-sync removals in one write of the assignment map, before
    the status writes: the brokers act on it at once. Without it (too large, refused) the status
    writes carry them, but for the Partitions returned: their statuses would name a replica again
    that an entry still in the map removed, and wait for a round whose map write drops it."""
    # As written, not as the map has them: an entry is judged against what the API holds.
    written = rec.as_written
    seen = {
        n: _seen(written[n])
        for n in {u.name for u in result.updates()} | set(rec.map.entries)
        if n in written
    }
    entries = commit.map_commit(result, seen, rec.map.entries)
    if entries is None:
        return frozenset()
    before, started = rec.map.entries, time.monotonic()
    try:
        await asyncio.to_thread(rec.map.write, settings, entries)
    except (kube.KubeError, MapTooLarge) as exc:
        logger.warning("assignment map not written (%s); the Partition statuses carry the changes", exc)
        return commit.superseded(result, rec.map.entries)
    logger.info(
        "wrote the assignment map in %.3fs: %d entries ahead of their Partitions "
        "(%d primary changes, %d in-sync removals), %d of them new this round",
        time.monotonic() - started,
        len(entries),
        sum(1 for e in entries.values() if not e.resource_version),
        sum(1 for e in entries.values() if e.resource_version),
        sum(1 for n, e in entries.items() if before.get(n) != e),
    )
    return frozenset()


async def reconcile_round(
    rec: Reconciler,
    body: Mapping[str, Any],
    pods_index: kopf.Index[indexes.Key, Any],
    leases_index: kopf.Index[indexes.Key, Any],
    partitions_index: kopf.Index[indexes.Key, Any],
    logger: Any,
    statefulsets_index: kopf.Index[indexes.Key, Any] | None = None,
) -> Plan:
    key = (rec.namespace, rec.name)
    if not rec.map.loaded:
        await asyncio.to_thread(rec.map.load)
    pods, leases = indexes.values(pods_index, key), indexes.values(leases_index, key)
    indexed = indexes.values(partitions_index, key)
    sets = indexes.values(statefulsets_index, key) if statefulsets_index is not None else ()
    inputs = quiet.Inputs.of(body, pods, leases, indexed, sets, rec.watching_since)
    if rec.quiet.skip(inputs, time.monotonic(), datetime.now(UTC)):
        metrics.ROUNDS.labels(rec.name, "skipped").inc()
        return Plan()
    metrics.ROUNDS.labels(rec.name, "full").inc()
    # Parsed after the skip: a skipped round should cost next to nothing (see docs/operator.md).
    settings = ClusterSettings.from_body(body)
    snapshot = observe.Snapshot(
        cluster=dict(body), pods=pods, leases=leases, partitions=rec.partitions(indexed)
    )
    stale = rec.nodes.stale(filter(None, map(observe.node_of, snapshot.pods_of(names.ROLE_MM).values())))
    if stale:
        await asyncio.to_thread(rec.nodes.read, stale)
    now = datetime.now(UTC)
    if rec.watching_since is None:
        rec.watching_since = now
    state = observe.cluster_state(
        snapshot,
        now,
        settings.mm_replicas,
        rec.first_seen_lost,
        cache=rec.cache,
        recorded=rec.recorded,
        node_labels=rec.nodes.labels,
        watching_since=rec.watching_since,
    )
    rec.track_losses(state, now)
    t_observed = time.monotonic()
    waiting = waiting_for_initial_mms(snapshot, state, settings, now)
    replanned = not (waiting or rec.unchanged(state, settings))
    result = plan(state, max_creates=MAX_CREATES_PER_ROUND) if replanned else Plan()
    if replanned:
        rec.figures_held = False
    if result.changes:
        before = {p.name: p.status for p in state.partitions}
        planned = len(result.changes)
        result = figures.throttle_figures(result, before, rec.status_written, time.monotonic())
        rec.figures_held = len(result.changes) < planned
    if rec.behind:
        result = commit.follow_ups(rec.behind, result)
    applied = True
    if result.changes:
        t_planned = time.monotonic()
        current = {str(b["metadata"]["name"]): b for b in snapshot.partitions}
        held = await _commit_primaries(rec, settings, result, logger)
        if held:
            kept = tuple(
                c for c in result.changes if not (isinstance(c, UpdatePartitionStatus) and c.name in held)
            )
            result = replace(result, changes=kept)
        outcome = await asyncio.to_thread(apply_plan, settings, result, current, cluster_ref(body), rec.pool)
        if len(result.changes) >= 20 or outcome.failovers:
            # Why each MM counted as lost: a failover nobody expected is explained by the log.
            lost = ", ".join(f"{m.name}: {m.lost_reason}" for m in state.message_managers if not m.alive)
            logger.info(
                "round: %d changes (%d failovers) planned in %.3fs, applied in %.3fs, %d conflicts%s",
                len(result.changes),
                len(outcome.failovers),
                t_planned - t_observed,
                time.monotonic() - t_planned,
                outcome.conflicts,
                f"; lost: {lost}" if lost else "",
            )
        rec.remember(outcome)
        written_at = time.monotonic()
        for name in outcome.written:
            rec.status_written[name] = written_at
        for name in [n for n in rec.status_written if n not in current]:
            del rec.status_written[name]
        _post_events(outcome)
        if outcome.failover_records:
            reason, message = failover_summary(outcome.failover_records)
            kopf.event(
                kopf.Body(cast(kopf.RawBody, cluster_ref(body))),
                type="Warning",
                reason=reason,
                message=message,
            )
        if outcome.failover_records:
            rec.record_failovers(body, state, outcome.failover_records, now)
        _count_changes(rec.name, result)
        for _name, record in outcome.failover_records:
            if failover_history.kind_of(record) == "handoff":
                continue  # planned, not a failure: counted in HANDOFFS
            metrics.FAILOVERS.labels(rec.name).inc()
            metrics.FAILOVER_SECONDS.labels(rec.name).observe(record.duration_seconds)
        if outcome.conflicts:
            metrics.CONFLICTS.labels(rec.name).inc(outcome.conflicts)
        if outcome.errors:
            metrics.ERRORS.labels(rec.name).inc(outcome.errors)
        if any(isinstance(c, ReleaseFinalizer) for c in result.changes):
            logger.info("released %d drained partitions", len(result.releases()))
        if outcome.conflicts or outcome.errors:
            rec.fingerprint = None  # re-plan next round, even if nothing else changed
            applied = False
    if applied:
        # The failovers of restarted MMs are applied: their new processes are accounted for.
        await asyncio.to_thread(_record_incarnations, rec, snapshot)
    block = await reconcile_scale_down(snapshot, state, settings, result, logger)
    roll = None
    if statefulsets_index is not None:
        roll = await reconcile_roll(
            snapshot, sets, state, settings, rec.roll, cluster_ref(body), block is not None
        )
    await rec.status.write(body, snapshot, state, settings, block, now, rec.failovers, roll)
    settled = quiet.settled(
        changes_planned=bool(result.changes) or rec.figures_held,
        applied=applied,
        waiting_for_mms=waiting,
        scale_down_blocked=block is not None,
        roll_is_idle=quiet.roll_idle(roll, watched=statefulsets_index is not None),
        unwatched_writes=bool(rec.written),
        follow_ups=bool(rec.behind),
        planned=rec.fingerprint is not None,
        retention_pending=quiet.retention_pending(state.partitions),
        mms=state.message_managers,
    )
    rec.quiet.full_round(inputs, settled, time.monotonic())
    if rec.bursts.due(len(result.changes), settled):
        await asyncio.to_thread(memory.release_freed_memory)
    return result


@kopf.daemon(
    names.GROUP,
    names.VERSION,
    names.CLUSTER_PLURAL,
    id="partitions",
    cancellation_timeout=5.0,
    cancellation_backoff=0.5,
)
async def reconcile_partitions(
    *,
    name: str,
    namespace: str | None,
    body: kopf.Body,
    stopped: kopf.DaemonStopped,
    logger: logging.Logger | logging.LoggerAdapter[Any],
    **kwargs: Any,
) -> None:
    """``kwargs`` carries the indexes ``broker_pods``, ``mm_leases``, ``cluster_partitions`` and
    ``broker_statefulsets``."""
    namespace = namespace or "default"
    broker_pods, mm_leases, cluster_partitions = (
        kwargs["broker_pods"],
        kwargs["mm_leases"],
        kwargs["cluster_partitions"],
    )
    rec = Reconciler(name, namespace)
    rec.statefulsets_index = kwargs.get("broker_statefulsets")
    key = (namespace, name)
    wake, changed = indexes.wakeup(key), indexes.changes(key)

    def indexed() -> dict[str, frozenset[str]]:
        return {
            kind: frozenset(str(b["metadata"]["name"]) for b in indexes.values(index, key))
            for kind, index in (
                ("pods", broker_pods),
                ("leases", mm_leases),
                ("partitions", cluster_partitions),
            )
        }

    try:
        # After a peering pause Kopf re-lists while this daemon starts: never plan on half a view.
        await index_sync.wait_until_indexed(namespace, name, indexed, logger)
        await _loop(rec, body, stopped, logger, broker_pods, mm_leases, cluster_partitions, wake, changed)
    finally:
        rec.pool.shutdown(wait=False)


async def _loop(
    rec: Reconciler,
    body: kopf.Body,
    stopped: kopf.DaemonStopped,
    logger: logging.Logger | logging.LoggerAdapter[Any],
    broker_pods: kopf.Index[indexes.Key, Any],
    mm_leases: kopf.Index[indexes.Key, Any],
    cluster_partitions: kopf.Index[indexes.Key, Any],
    wake: asyncio.Event,
    changed: asyncio.Event,
) -> None:
    name = rec.name
    while not stopped:
        started = time.monotonic()
        # Cleared before the round reads its inputs: an event during the round wakes the next one.
        wake.clear()
        changed.clear()
        try:
            await reconcile_round(
                rec, body, broker_pods, mm_leases, cluster_partitions, logger, rec.statefulsets_index
            )
            delay = rec.quiet.sleep_for(time.monotonic(), datetime.now(UTC), INTERVAL_S)
            soonest = INTERVAL_S
        except Exception as exc:
            metrics.ERRORS.labels(name).inc()
            logger.warning("reconcile round failed: %s", exc)
            rec.status.last_status = None
            rec.quiet.reset()
            # After a failed round only a pod event cuts the back-off short, as before.
            delay = soonest = ERROR_BACKOFF_S
        finally:
            metrics.RECONCILE_SECONDS.labels(name).observe(time.monotonic() - started)
        await sleep_between_rounds(wake, changed, stopped.wait(), delay, started + soonest)


async def sleep_between_rounds(
    wake: asyncio.Event, changed: asyncio.Event, stop: Awaitable[object], delay: float, not_before: float
) -> None:
    """Sleep ``delay`` seconds or until ``wake`` is set or ``stop`` (the daemon's stop) is done.
    ``changed`` cuts a longer sleep short too, but not below ``not_before`` (monotonic): a burst of
    Partition writes does not turn the rounds into a busy loop."""
    stopping = asyncio.ensure_future(stop)
    woken = asyncio.ensure_future(wake.wait())
    changing = asyncio.ensure_future(changed.wait())
    try:
        done, _ = await asyncio.wait(
            {woken, changing, stopping}, timeout=delay, return_when=asyncio.FIRST_COMPLETED
        )
        rest = not_before - time.monotonic()
        if changing in done and woken not in done and stopping not in done and rest > 0:
            await asyncio.wait({woken, stopping}, timeout=rest, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiting in (woken, changing, stopping):
            waiting.cancel()
