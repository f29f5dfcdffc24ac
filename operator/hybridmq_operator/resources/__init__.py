"""Pure builders: a BrokerCluster's settings in, child manifests (plain dicts) out."""

from hybridmq_operator import names
from hybridmq_operator.resources.cluster_secret import build_cluster_secret, generate_value
from hybridmq_operator.resources.common import Manifest
from hybridmq_operator.resources.configmap import build_configmap, config_digest
from hybridmq_operator.resources.network_policy import build_network_policy
from hybridmq_operator.resources.pdb import build_pdb
from hybridmq_operator.resources.rbac import build_role, build_role_binding, build_service_account
from hybridmq_operator.resources.services import build_client_service, build_headless_service
from hybridmq_operator.resources.statefulsets import build_cm_statefulset, build_mm_statefulset
from hybridmq_operator.settings import ClusterSettings

__all__ = [
    "Manifest",
    "build_children",
    "build_client_service",
    "build_cluster_secret",
    "build_cm_statefulset",
    "build_configmap",
    "build_headless_service",
    "build_mm_statefulset",
    "build_network_policy",
    "build_pdb",
    "build_role",
    "build_role_binding",
    "build_service_account",
    "config_digest",
    "generate_value",
]


def build_children(settings: ClusterSettings, mm_replicas: int | None = None) -> list[Manifest]:
    """Every child applied with server-side apply, in order (the cluster secret is created apart:
    ``build_cluster_secret``, create-only)."""
    return [
        build_service_account(settings),
        build_role(settings),
        build_role_binding(settings),
        build_configmap(settings),
        build_network_policy(settings),
        build_headless_service(settings, names.ROLE_CM),
        build_headless_service(settings, names.ROLE_MM),
        build_client_service(settings),
        build_pdb(settings, names.ROLE_CM),
        build_pdb(settings, names.ROLE_MM),
        build_cm_statefulset(settings),
        build_mm_statefulset(settings, mm_replicas),
    ]
