"""Apply a planner ``Plan`` to the API server (sync: runs in a worker thread).

Every write is idempotent or fenced:
* creates tolerate ``409 AlreadyExists`` (an earlier round or another operator already made it);
* status writes carry the ``resourceVersion`` the planner saw: a stale decision fails with 409
  and the next round re-plans from fresh state, so a failover is never applied twice (no double
  epoch bump);
* deletes tolerate 404; finalizer releases are fenced by resourceVersion too.

Status writes of many partitions (e.g. 1,000 fixed partitions of a lost MM) go out in parallel,
on a pool of writers per BrokerCluster.
"""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from hybridmq.api.resources import PARTITION_FINALIZER, FailoverRecord, PartitionStatus
from hybridmq.planner import (
    CreatePartition,
    DeletePartition,
    MessageManagersEvacuated,
    Plan,
    PlanEvent,
    ReleaseFinalizer,
    UpdatePartitionStatus,
)
from hybridmq_operator import compact, kube, names
from hybridmq_operator.resources.common import owner_reference
from hybridmq_operator.settings import ClusterSettings

LOG = logging.getLogger(__name__)
WRITERS = 12


def writer_pool(name: str) -> concurrent.futures.ThreadPoolExecutor:
    """One pool per BrokerCluster, so one cluster's bulk writes never delay another's failover."""
    return concurrent.futures.ThreadPoolExecutor(WRITERS, thread_name_prefix=f"hybridmq-apply-{name}")


_DEFAULT_POOL = writer_pool("default")


@dataclass
class Outcome:
    """What a round wrote: bodies returned by the server (for the stale-read overlay), events."""

    written: dict[str, dict[str, Any]] = field(default_factory=dict)
    deleted: set[str] = field(default_factory=set)
    events: list[tuple[dict[str, Any], PlanEvent]] = field(default_factory=list)
    conflicts: int = 0
    errors: int = 0
    failovers: list[tuple[str, float]] = field(default_factory=list)  # (partition, duration)
    failover_records: list[tuple[str, FailoverRecord]] = field(default_factory=list)


def is_new_failover(current: Mapping[str, Any], status: PartitionStatus) -> bool:
    """Whether ``status`` records a failover the current body does not have yet.

    Compared as parsed records, not strings: the API server hands back ``...Z`` where we wrote
    ``+00:00``, and a textual comparison counted every later status write as one more failover.
    """
    new = status.last_failover
    if new is None or new.time is None:
        return False
    raw = (current.get("status") or {}).get("lastFailover")
    if not raw:
        return True
    try:
        old = FailoverRecord.model_validate(raw)
    except ValidationError:
        return True
    return old.time != new.time or old.to != new.to or old.from_ != new.from_


def status_json(status: PartitionStatus) -> dict[str, Any]:
    """The whole status, nulls included: a merge patch with null removes a field (e.g. primary)."""
    return status.model_dump(mode="json", by_alias=True)


def object_ref(body: Mapping[str, Any], kind: str) -> dict[str, Any]:
    """One of our resources as the object of an Event."""
    meta = body.get("metadata") or {}
    return {
        "apiVersion": names.API_VERSION,
        "kind": kind,
        "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace"), "uid": meta.get("uid")},
    }


def partition_ref(body: Mapping[str, Any]) -> dict[str, Any]:
    return object_ref(body, names.PARTITION_KIND)


def partition_manifest(settings: ClusterSettings, change: CreatePartition) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": change.name,
        "namespace": settings.namespace,
        "labels": {**names.common_labels(settings.name), **dict(change.labels)},
        "finalizers": [PARTITION_FINALIZER],
    }
    if settings.uid:
        ref = owner_reference(settings)
        ref["blockOwnerDeletion"] = False
        meta["ownerReferences"] = [ref]
    meta["labels"].pop(names.LABEL_COMPONENT, None)
    return {
        "apiVersion": names.API_VERSION,
        "kind": names.PARTITION_KIND,
        "metadata": meta,
        "spec": change.spec.model_dump(mode="json", by_alias=True, exclude_none=True),
    }


def _create(settings: ClusterSettings, change: CreatePartition, out: Outcome) -> None:
    try:
        created = kube.create(partition_manifest(settings, change))
    except kube.KubeError as exc:
        if exc.conflict:
            return
        raise
    patch = {"metadata": {"resourceVersion": created["metadata"]["resourceVersion"]}}
    patch["status"] = status_json(change.status)
    body = kube.merge_patch(
        names.API_VERSION, names.PARTITION_KIND, settings.namespace, change.name, patch, "status"
    )
    out.written[change.name] = compact.json_copy(kube.without_managed_fields(body))  # until the watch has it
    out.events.append((partition_ref(body), PlanEvent(change.reason, change.message)))


def _update(
    settings: ClusterSettings, change: UpdatePartitionStatus, current: Mapping[str, Any], out: Outcome
) -> None:
    rv = (current.get("metadata") or {}).get("resourceVersion")
    patch: dict[str, Any] = {"status": status_json(change.status)}
    if rv:
        patch["metadata"] = {"resourceVersion": rv}
    try:
        body = kube.merge_patch(
            names.API_VERSION, names.PARTITION_KIND, settings.namespace, change.name, patch, "status"
        )
    except kube.KubeError as exc:
        if exc.conflict or exc.not_found:
            out.conflicts += 1
            return
        raise
    out.written[change.name] = compact.json_copy(kube.without_managed_fields(body))  # until the watch has it
    ref = partition_ref(body)
    out.events.extend((ref, e) for e in change.events)
    record = change.status.last_failover
    if record is not None and is_new_failover(current, change.status):
        out.failovers.append((change.name, record.duration_seconds))
        out.failover_records.append((change.name, record))


def _delete(
    settings: ClusterSettings, change: DeletePartition, current: Mapping[str, Any], out: Outcome
) -> None:
    kube.delete(names.API_VERSION, names.PARTITION_KIND, settings.namespace, change.name)
    out.events.append((partition_ref(current), PlanEvent(change.reason, change.message)))


def _release(
    settings: ClusterSettings, change: ReleaseFinalizer, current: Mapping[str, Any], out: Outcome
) -> None:
    meta = current.get("metadata") or {}
    finalizers = [f for f in meta.get("finalizers") or [] if f != change.finalizer]
    patch = {"metadata": {"finalizers": finalizers, "resourceVersion": meta.get("resourceVersion")}}
    try:
        kube.merge_patch(names.API_VERSION, names.PARTITION_KIND, settings.namespace, change.name, patch)
    except kube.KubeError as exc:
        if exc.conflict or exc.not_found:
            out.conflicts += 1
            return
        raise
    out.deleted.add(change.name)
    out.events.append((partition_ref(current), PlanEvent(change.reason, change.message)))


def apply_plan(
    settings: ClusterSettings,
    plan: Plan,
    current: Mapping[str, Mapping[str, Any]],
    cluster_ref: Mapping[str, Any],
    pool: concurrent.futures.ThreadPoolExecutor | None = None,
) -> Outcome:
    """Apply ``plan``'s changes in order; ``current`` maps partition name to the body planned on."""
    out = Outcome()
    executor = pool or _DEFAULT_POOL
    futures: list[concurrent.futures.Future[None]] = []

    def run(fn: Any, *args: Any) -> None:
        futures.append(executor.submit(fn, *args))

    def drain() -> None:
        for fut in futures:
            try:
                fut.result()
            except Exception as exc:
                out.errors += 1
                LOG.warning("partition write failed: %s", exc)
        futures.clear()

    for change in plan.changes:
        if isinstance(change, UpdatePartitionStatus):
            if change.name in current:
                run(_update, settings, change, current[change.name], out)
        elif isinstance(change, CreatePartition):
            run(_create, settings, change, out)
        else:
            # Deletes and releases come after the status writes of the same round.
            drain()
            try:
                if isinstance(change, DeletePartition) and change.name in current:
                    _delete(settings, change, current[change.name], out)
                elif isinstance(change, ReleaseFinalizer) and change.name in current:
                    _release(settings, change, current[change.name], out)
                elif isinstance(change, MessageManagersEvacuated):
                    out.events.append((dict(cluster_ref), PlanEvent(change.reason, change.message)))
            except Exception as exc:
                out.errors += 1
                LOG.warning("%s failed: %s", type(change).__name__, exc)
    drain()
    return out
