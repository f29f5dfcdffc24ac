"""In-memory indexes fed by Kopf's watch streams: the reconcile daemon reads these, not the API.

Keys are ``(namespace, cluster)``; values are plain-dict copies of the bodies.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import kopf

from hybridmq_operator import compact, kube, names, quiet
from hybridmq_operator.handlers.silent import silent

Key = tuple[str, str]

# One wake-up event per cluster: pod changes (deletions included) cut the daemon's sleep short.
_wakeups: dict[Key, asyncio.Event] = {}
# And one for every other input of a round (Partitions, MM Leases, StatefulSets, the
# BrokerCluster): it ends a quiet daemon's long sleep, not the short one between busy rounds.
_changes: dict[Key, asyncio.Event] = {}
# Each MM Lease as last seen, without its renewal time: a renewal alone changes nothing.
_lease_shapes: dict[tuple[str, str], tuple[Any, ...]] = {}

_BROKER_PODS: dict[str, Any] = {
    names.LABEL_MANAGED_BY: names.MANAGER,
    names.LABEL_CLUSTER: kopf.PRESENT,
}


def wakeup(key: Key) -> asyncio.Event:
    event = _wakeups.get(key)
    if event is None:
        event = _wakeups[key] = asyncio.Event()
    return event


def changes(key: Key) -> asyncio.Event:
    event = _changes.get(key)
    if event is None:
        event = _changes[key] = asyncio.Event()
    return event


def _changed(namespace: str | None, cluster: str) -> None:
    event = _changes.get((namespace or "", cluster))
    if event is not None:
        event.set()


def _copy(body: Mapping[str, Any]) -> dict[str, Any]:
    """A plain copy of what the daemon reads, without managedFields (two thirds of a Partition's size)
    and with the strings it shares with other objects interned."""
    copied: dict[str, Any] = compact.json_copy(kube.without_managed_fields(body))
    return copied


@kopf.index("pods", labels=_BROKER_PODS)
def broker_pods(
    *, namespace: str | None, labels: Mapping[str, str], body: kopf.Body, **_: Any
) -> dict[Key, Any]:
    return {(namespace or "", labels[names.LABEL_CLUSTER]): _copy(body)}


@kopf.on.event("pods", labels=_BROKER_PODS, id=silent("broker_pod_changed"))
async def broker_pod_changed(*, namespace: str | None, labels: Mapping[str, str], **_: Any) -> None:
    """Wake the cluster's daemon on every pod event. Index functions never see a deletion (Kopf
    drops the object from the index, which it updates before calling this), and a force-deleted
    pod is gone, not merely marked for deletion."""
    event = _wakeups.get((namespace or "", labels.get(names.LABEL_CLUSTER, "")))
    if event is not None:
        event.set()


@kopf.index(
    "coordination.k8s.io",
    "v1",
    "leases",
    labels={names.LABEL_ROLE: names.ROLE_MM, names.LABEL_CLUSTER: kopf.PRESENT},
)
def mm_leases(
    *, namespace: str | None, labels: Mapping[str, str], body: kopf.Body, **_: Any
) -> dict[Key, Any]:
    return {(namespace or "", labels[names.LABEL_CLUSTER]): _copy(body)}


@kopf.on.event(
    "coordination.k8s.io",
    "v1",
    "leases",
    labels={names.LABEL_ROLE: names.ROLE_MM, names.LABEL_CLUSTER: kopf.PRESENT},
    id=silent("mm_lease_changed"),
)
async def mm_lease_changed(
    *, type: str, namespace: str | None, name: str, labels: Mapping[str, str], body: kopf.Body, **_: Any
) -> None:
    """Wake a quiet daemon when a Lease appears, goes or says something new (holder, report,
    duration): not on a renewal, which only moves its expiry (the daemon's sleep allows for it)."""
    key = (namespace or "", name)
    if type == "DELETED":
        _lease_shapes.pop(key, None)
    else:
        shape = quiet.lease_shape(body)
        if _lease_shapes.get(key) == shape:
            return
        _lease_shapes[key] = shape
    _changed(namespace, labels.get(names.LABEL_CLUSTER, ""))


@kopf.on.event("apps", "v1", "statefulsets", labels=_BROKER_PODS, id=silent("broker_statefulset_changed"))
async def broker_statefulset_changed(*, namespace: str | None, labels: Mapping[str, str], **_: Any) -> None:
    _changed(namespace, labels.get(names.LABEL_CLUSTER, ""))


@kopf.on.event(names.GROUP, names.VERSION, names.PARTITION_PLURAL, id=silent("partition_changed"))
async def partition_changed(*, namespace: str | None, spec: kopf.Spec, **_: Any) -> None:
    _changed(namespace, str(spec.get("cluster", "")))


@kopf.on.event(names.GROUP, names.VERSION, names.CLUSTER_PLURAL, id=silent("broker_cluster_changed"))
async def broker_cluster_changed(*, namespace: str | None, name: str, **_: Any) -> None:
    _changed(namespace, name)


@kopf.index("apps", "v1", "statefulsets", labels=_BROKER_PODS)
def broker_statefulsets(
    *, namespace: str | None, labels: Mapping[str, str], body: kopf.Body, **_: Any
) -> dict[Key, Any]:
    """The CM and MM StatefulSets: their ``updateRevision`` tells the roll which pods are outdated."""
    return {(namespace or "", labels[names.LABEL_CLUSTER]): _copy(body)}


@kopf.index(names.GROUP, names.VERSION, names.PARTITION_PLURAL)
def cluster_partitions(
    *, namespace: str | None, spec: kopf.Spec, body: kopf.Body, **_: Any
) -> dict[Key, Any]:
    return {(namespace or "", str(spec.get("cluster", ""))): _copy(body)}


def values(index: kopf.Index[Key, Any], key: Key) -> tuple[dict[str, Any], ...]:
    store = index.get(key)
    return tuple(store) if store is not None else ()
