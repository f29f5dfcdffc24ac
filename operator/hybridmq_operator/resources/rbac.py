"""The brokers' identity: a ServiceAccount, a Role with only what the brokers do, a RoleBinding.

Brokers read Partitions, their BrokerCluster and its assignment map ConfigMap
(``hybridmq.broker.kube_source``) and each MM
renews its own Lease (``hybridmq.broker.lease``). They never write a Partition or its status.
"""

from typing import Any

from hybridmq.api import assignment_map
from hybridmq_operator import names
from hybridmq_operator.resources.common import Manifest, metadata
from hybridmq_operator.settings import ClusterSettings

BROKER_RULES: list[dict[str, Any]] = [
    {
        "apiGroups": [names.GROUP],
        "resources": [names.PARTITION_PLURAL, names.CLUSTER_PLURAL],
        "verbs": ["get", "list", "watch"],
    },
    {
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases"],
        "verbs": ["get", "create", "update", "patch"],
    },
]


def build_service_account(settings: ClusterSettings) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": metadata(settings, names.service_account_name(settings.name)),
        "automountServiceAccountToken": True,
    }


def build_role(settings: ClusterSettings) -> Manifest:
    rules = [dict(rule) for rule in BROKER_RULES]
    # Every broker follows the cluster's assignment map (a failover's primaries in one object).
    rules.append(
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": [assignment_map.configmap_name(settings.name)],
            "verbs": ["get", "list", "watch"],
        }
    )
    # The CMs read their users (from BrokerUsers) by name: that one Secret, nothing else.
    rules.append(
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": [names.users_secret_name(settings.name)],
            "verbs": ["get"],
        }
    )
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": metadata(settings, names.service_account_name(settings.name)),
        "rules": rules,
    }


def build_role_binding(settings: ClusterSettings) -> Manifest:
    name = names.service_account_name(settings.name)
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": metadata(settings, name),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": settings.namespace}],
    }
