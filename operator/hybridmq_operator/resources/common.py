"""Metadata shared by every child object: labels, owner reference, namespace."""

from typing import Any

from hybridmq_operator import names
from hybridmq_operator.settings import ClusterSettings

Manifest = dict[str, Any]


def owner_reference(settings: ClusterSettings) -> dict[str, Any]:
    """Makes the BrokerCluster the controller of a child, so deleting it garbage-collects the child."""
    return {
        "apiVersion": names.API_VERSION,
        "kind": names.CLUSTER_KIND,
        "name": settings.name,
        "uid": settings.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def metadata(settings: ClusterSettings, name: str, role: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": settings.namespace,
        "labels": names.common_labels(settings.name, role),
    }
    if settings.uid:
        meta["ownerReferences"] = [owner_reference(settings)]
    return meta
