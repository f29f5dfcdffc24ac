"""NetworkPolicy ``<c>-mm-peers``: only the cluster's own CMs and MMs reach the MMs' broker port.

It selects the MM pods; their broker port admits pods of the same BrokerCluster (CMs and MMs,
by the ``app.kubernetes.io/instance`` selector labels) and nobody else, while their HTTP port
(probes, ``/metrics``, read-only ``/admin``) stays open. CM pods are not selected: their client
port stays open. The operator itself never connects to an MM.
"""

from hybridmq_operator import names
from hybridmq_operator.resources.common import Manifest, metadata
from hybridmq_operator.settings import ClusterSettings


def build_network_policy(settings: ClusterSettings) -> Manifest:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(settings, names.network_policy_name(settings.name), names.ROLE_MM),
        "spec": {
            "podSelector": {"matchLabels": names.selector_labels(settings.name, names.ROLE_MM)},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [{"podSelector": {"matchLabels": names.selector_labels(settings.name)}}],
                    "ports": [{"protocol": "TCP", "port": names.MM_PORT}],
                },
                {"ports": [{"protocol": "TCP", "port": names.HTTP_PORT}]},
            ],
        },
    }
