"""BrokerCluster deletion: its Partitions go with it (owner references), so release their
data finalizers — the MMs that held the data are being deleted too."""

from __future__ import annotations

import logging
from typing import Any

import kopf

from hybridmq.api.resources import PARTITION_FINALIZER
from hybridmq_operator import kube, names


@kopf.on.delete(names.GROUP, names.VERSION, names.CLUSTER_PLURAL, optional=True)
def release_partitions(
    *, name: str, namespace: str | None, logger: logging.Logger | logging.LoggerAdapter[Any], **_: Any
) -> None:
    for body in kube.list_objects(
        names.API_VERSION, names.PARTITION_KIND, namespace, {names.LABEL_CLUSTER: name}
    ):
        meta = body["metadata"]
        finalizers = [f for f in meta.get("finalizers") or [] if f != PARTITION_FINALIZER]
        if finalizers != list(meta.get("finalizers") or []):
            kube.merge_patch(
                names.API_VERSION,
                names.PARTITION_KIND,
                namespace,
                meta["name"],
                {"metadata": {"finalizers": finalizers}},
            )
        kube.delete(names.API_VERSION, names.PARTITION_KIND, namespace, meta["name"])
    logger.info("released the partitions of %s", name)
