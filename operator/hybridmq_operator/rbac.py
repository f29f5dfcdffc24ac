"""Every API permission the operator uses: the source of truth for the chart's ClusterRole.

Kept next to the code that makes the calls; ``tests/k8s/test_operator_rbac.py`` runs the operator
with exactly these rules.
"""

from __future__ import annotations

from typing import Any

from hybridmq_operator import names

OPERATOR_RULES: list[dict[str, Any]] = [
    # The custom resources: watched by Kopf, Partitions created/deleted by the planner's changes.
    {
        "apiGroups": [names.GROUP],
        "resources": [names.CLUSTER_PLURAL],
        "verbs": ["get", "list", "watch", "patch"],  # patch: Kopf's finalizer and annotations
    },
    {
        "apiGroups": [names.GROUP],
        "resources": [f"{names.CLUSTER_PLURAL}/status", f"{names.PARTITION_PLURAL}/status"],
        "verbs": ["get", "patch", "update"],
    },
    # BrokerUsers: watched (an event recomputes the cluster's users), their status written.
    {"apiGroups": [names.GROUP], "resources": [names.USER_PLURAL], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [names.GROUP], "resources": [f"{names.USER_PLURAL}/status"], "verbs": ["get", "patch"]},
    {
        "apiGroups": [names.GROUP],
        "resources": [names.PARTITION_PLURAL],
        "verbs": ["get", "list", "watch", "create", "patch", "delete"],
    },
    # What the operator watches to detect MM loss; the roll marks the next MM (patch) and deletes
    # one outdated pod at a time.
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "patch", "delete"]},
    # The nodes MM pods run on: their topologyKey label is the MMs' failure domain.
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
    # Leases: watched for MM liveness; get/create/update/patch only because the operator creates
    # the brokers' Role, and RBAC lets it grant only what it holds itself.
    {
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases"],
        "verbs": ["get", "list", "watch", "create", "update", "patch"],
    },
    # Children of a BrokerCluster, written with server-side apply.
    {
        "apiGroups": [""],
        "resources": ["services", "serviceaccounts"],
        "verbs": ["get", "create", "patch"],
    },
    # ConfigMaps too, and list/watch: the brokers' Role lets them watch the assignment map, and
    # Kubernetes lets the operator grant only what it holds itself.
    {
        "apiGroups": [""],
        "resources": ["configmaps"],
        "verbs": ["get", "list", "watch", "create", "patch"],
    },
    # list/watch: the roll reads their updateRevision.
    {
        "apiGroups": ["apps"],
        "resources": ["statefulsets"],
        "verbs": ["get", "list", "watch", "create", "patch"],
    },
    {
        "apiGroups": ["networking.k8s.io"],
        "resources": ["networkpolicies"],
        "verbs": ["get", "create", "patch"],
    },
    # The cluster secret: created once (AlreadyExists is fine). The cluster CA (tls.py): its Secret
    # read back to sign, the brokers' certificate and the CA certificate applied (patch). Never
    # listed or watched: only the Secrets it names.
    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "create", "patch"]},
    {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": ["get", "create", "patch"]},
    {
        "apiGroups": ["rbac.authorization.k8s.io"],
        "resources": ["roles", "rolebindings"],
        "verbs": ["get", "create", "patch"],
    },
    # Kubernetes Events for each failover step and garbage collection (posted by Kopf).
    {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create"]},
    # Kopf peering (operator HA), when enabled.
    {
        "apiGroups": ["kopf.dev"],
        "resources": ["kopfpeerings", "clusterkopfpeerings"],
        "verbs": ["get", "list", "watch", "patch"],
    },
]
