"""Partitions that name a BrokerCluster that does not exist get a status saying so.

Nothing else would write their status (each cluster's daemon only looks at its own partitions), so
without this a user's Partition with a typo in ``spec.cluster`` would sit there with no status.
Event handlers store no progress on the objects, and this one writes only when the condition is
missing, so the thousands of Partitions of healthy clusters cost a set lookup per watch event.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import kopf

from hybridmq.api.resources import Condition, ConditionStatus, PartitionState
from hybridmq_operator import kube, names
from hybridmq_operator.handlers.silent import silent

REASON = "ClusterNotFound"
HANDLER = "partition_without_cluster"


@kopf.index(names.GROUP, names.VERSION, names.CLUSTER_PLURAL)
def cluster_names(*, namespace: str | None, name: str, **_: Any) -> dict[str, str]:
    return {namespace or "": name}


def missing_cluster_status(cluster: str, namespace: str, now: datetime) -> dict[str, Any]:
    """The status of a Partition whose BrokerCluster does not exist."""
    cond = Condition(
        type="Ready",
        status=ConditionStatus.FALSE,
        reason=REASON,
        message=f"BrokerCluster {cluster!r} does not exist in namespace {namespace}: nothing serves "
        "this partition",
        last_transition_time=now,
    )
    return {
        "state": PartitionState.PENDING.value,
        "conditions": [cond.model_dump(mode="json", exclude_none=True)],
    }


def says_missing(status: Mapping[str, Any] | None) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("reason") == REASON for c in (status or {}).get("conditions") or []
    )


@kopf.on.event(names.GROUP, names.VERSION, names.PARTITION_PLURAL, id=silent(HANDLER))
def partition_without_cluster(
    *,
    type: str,
    body: kopf.Body,
    namespace: str | None,
    name: str,
    logger: logging.Logger | logging.LoggerAdapter[Any],
    **kwargs: Any,
) -> None:
    """``kwargs`` carries the index ``cluster_names``."""
    cluster_names: kopf.Index[str, str] = kwargs["cluster_names"]
    if type == "DELETED" or body.metadata.get("deletionTimestamp"):
        return
    ns = namespace or ""
    cluster = str((body.get("spec") or {}).get("cluster") or "")
    if cluster in (cluster_names.get(ns) or ()) or says_missing(body.get("status")):
        return
    status = missing_cluster_status(cluster, ns, datetime.now(UTC))
    try:
        kube.merge_patch(names.API_VERSION, names.PARTITION_KIND, ns, name, {"status": status}, "status")
    except kube.KubeError as exc:
        if not exc.not_found:
            logger.warning("marking partition %s without its cluster failed: %s", name, exc)
