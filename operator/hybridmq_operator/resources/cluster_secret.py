"""Secret ``<c>-cluster-secret``: the secret every CM and MM of the cluster presents to its peers.

Created once, never updated (the operator only holds ``create`` on secrets): the value is made by
the caller (``generate_value``), so the builder stays pure and a re-run that gets AlreadyExists
keeps the value the pods already use.
"""

import base64
import secrets

from hybridmq_operator import names
from hybridmq_operator.resources.common import Manifest, metadata
from hybridmq_operator.settings import ClusterSettings


def generate_value() -> str:
    return secrets.token_urlsafe(32)


def build_cluster_secret(settings: ClusterSettings, value: str) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata(settings, names.cluster_secret_name(settings.name)),
        "type": "Opaque",
        "immutable": True,
        "data": {names.CLUSTER_SECRET_KEY: base64.b64encode(value.encode()).decode()},
    }
