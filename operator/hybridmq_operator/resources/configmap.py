"""The ConfigMap every broker reads, and the digest that rolls the pods when it changes.

The cluster configuration must stay consistent: every CM and MM must run with the
same configuration. The pod templates carry the digest of this ConfigMap's data, so any change to
it changes the templates and the StatefulSets roll every pod onto the new configuration.
"""

import hashlib
import json
from typing import Any

import yaml

from hybridmq_operator import names
from hybridmq_operator.resources.common import Manifest, metadata
from hybridmq_operator.settings import ClusterSettings


def broker_config(settings: ClusterSettings) -> dict[str, Any]:
    """The broker configuration (no replica counts: scaling must not roll the pods)."""
    return {
        "cluster": settings.name,
        "namespace": settings.namespace,
        "ports": {"cm": names.CM_CLIENT_PORT, "mm": names.MM_PORT, "http": names.HTTP_PORT},
        "replication": {"minInSync": settings.min_in_sync},
        "partitions": {"acceptWritesAfterFailover": settings.accept_writes_after_failover},
        "failureDetection": {
            "leaseDurationSeconds": settings.lease_duration_seconds,
            "renewIntervalMilliseconds": settings.lease_renew_milliseconds,
        },
        "auth": dict(settings.auth),
        "tls": dict(settings.tls),
    }


def config_data(settings: ClusterSettings) -> dict[str, str]:
    return {names.CONFIG_FILE: yaml.safe_dump(broker_config(settings), sort_keys=True)}


def config_digest(settings: ClusterSettings) -> str:
    canonical = json.dumps(config_data(settings), sort_keys=True).encode()
    return hashlib.sha256(canonical).hexdigest()


def build_configmap(settings: ClusterSettings) -> Manifest:
    meta = metadata(settings, names.configmap_name(settings.name))
    meta["annotations"] = {names.ANNOTATION_CONFIG_DIGEST: config_digest(settings)}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": config_data(settings)}
