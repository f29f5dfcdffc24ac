"""In-memory indexes fed by Kopf's watch streams: the reconcile daemon reads these, not the API.

Keys are ``(namespace, cluster)``; values are plain-dict copies of the bodies.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping
from typing import Any

import kopf

from hybridmq_operator import kube, names

Key = tuple[str, str]

# One wake-up event per cluster: pod changes (deletions included) cut the daemon's sleep short.
_wakeups: dict[Key, asyncio.Event] = {}

_BROKER_PODS: dict[str, Any] = {
    names.LABEL_MANAGED_BY: names.MANAGER,
    names.LABEL_CLUSTER: kopf.PRESENT,
}


def wakeup(key: Key) -> asyncio.Event:
    event = _wakeups.get(key)
    if event is None:
        event = _wakeups[key] = asyncio.Event()
    return event


def _copy(body: Mapping[str, Any]) -> dict[str, Any]:
    """A plain copy of what the daemon reads (a Partition's copy is 2.7 KB instead of 9 KB without
    its managedFields)."""
    return copy.deepcopy(kube.without_managed_fields(body))


@kopf.index("pods", labels=_BROKER_PODS)
def broker_pods(
    *, namespace: str | None, labels: Mapping[str, str], body: kopf.Body, **_: Any
) -> dict[Key, Any]:
    return {(namespace or "", labels[names.LABEL_CLUSTER]): _copy(body)}


@kopf.on.event("pods", labels=_BROKER_PODS)
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
