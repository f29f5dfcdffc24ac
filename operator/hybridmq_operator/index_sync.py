"""Before its first round, the reconcile daemon waits until Kopf's indexes hold the cluster.

Kopf holds its handlers back until every index is filled only once, when the operator starts.
After a peering pause (a standby taking over from an operator whose node was lost) Kopf lists
every watched resource again while the daemons start at once: a first round that ran before the
pods were listed took every MM for lost ("pod deleted") and failed healthy partitions over, a
fixed partition stayed without a primary for a round and its producers were refused
(``PARTITION_NOT_WRITABLE``). So the daemon lists the cluster's pods, MM Leases and Partitions
once through the API and starts planning only when the indexes hold at least those.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from hybridmq_operator import kube, names

WAIT_LIMIT_S = 30.0
POLL_S = 0.05
RELIST_S = 1.0

Names = Mapping[str, frozenset[str]]


def missing(listed: Names, indexed: Names) -> dict[str, list[str]]:
    """Per kind, the names the API server listed that the index does not hold yet."""
    gaps = {kind: sorted(wanted - indexed.get(kind, frozenset())) for kind, wanted in listed.items()}
    return {kind: gap for kind, gap in gaps.items() if gap}


def _names(bodies: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    return frozenset(str((b.get("metadata") or {}).get("name")) for b in bodies)


def list_cluster(namespace: str, cluster: str) -> dict[str, frozenset[str]]:
    """What the API server has of one BrokerCluster, the way the indexes select it."""
    pods = kube.list_objects(
        "v1", "Pod", namespace, {names.LABEL_MANAGED_BY: names.MANAGER, names.LABEL_CLUSTER: cluster}
    )
    leases = kube.list_objects(
        "coordination.k8s.io/v1",
        "Lease",
        namespace,
        {names.LABEL_ROLE: names.ROLE_MM, names.LABEL_CLUSTER: cluster},
    )
    partitions = [
        p
        for p in kube.list_objects(names.API_VERSION, names.PARTITION_KIND, namespace)
        if (p.get("spec") or {}).get("cluster") == cluster
    ]
    return {"pods": _names(pods), "leases": _names(leases), "partitions": _names(partitions)}


async def wait_until_indexed(
    namespace: str,
    cluster: str,
    indexed: Callable[[], dict[str, frozenset[str]]],
    logger: logging.Logger | logging.LoggerAdapter[Any],
    limit_s: float = WAIT_LIMIT_S,
) -> None:
    """Return once ``indexed()`` holds what the API server lists (listed again every second, so an
    object deleted meanwhile is not waited for), or after ``limit_s`` (logged: the rounds then plan
    on what the watches delivered, as before)."""
    deadline = time.monotonic() + limit_s
    listed_at = 0.0
    listed: Names = {}
    while True:
        if time.monotonic() - listed_at >= RELIST_S:
            try:
                listed = await asyncio.to_thread(list_cluster, namespace, cluster)
            except Exception as exc:  # the watches still fill the indexes: do not block on this
                logger.warning("could not list the cluster to check the indexes: %s", exc)
                return
            listed_at = time.monotonic()
        gaps = missing(listed, indexed())
        if not gaps:
            return
        if time.monotonic() > deadline:
            logger.warning("indexes still lack %s after %.0f s: planning anyway", gaps, limit_s)
            return
        await asyncio.sleep(POLL_S)
