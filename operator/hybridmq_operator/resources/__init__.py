"""Pure builders: a BrokerCluster's settings in, child manifests (plain dicts) out."""

from hybridmq_operator import names
from hybridmq_operator.resources.common import Manifest
from hybridmq_operator.resources.configmap import build_configmap, config_digest
from hybridmq_operator.resources.pdb import build_pdb
from hybridmq_operator.resources.rbac import build_role, build_role_binding, build_service_account
from hybridmq_operator.resources.services import build_client_service, build_headless_service
from hybridmq_operator.resources.statefulsets import build_cm_statefulset, build_mm_statefulset
from hybridmq_operator.settings import ClusterSettings

__all__ = [
    "Manifest",
    "build_children",
    "build_client_service",
    "build_cm_statefulset",
    "build_configmap",
    "build_headless_service",
    "build_mm_statefulset",
    "build_pdb",
    "build_role",
    "build_role_binding",
    "build_service_account",
    "config_digest",
]


def build_children(settings: ClusterSettings, mm_replicas: int | None = None) -> list[Manifest]:
    """Every child of a BrokerCluster, in the order they should be applied."""
    return [
        build_service_account(settings),
        build_role(settings),
        build_role_binding(settings),
        build_configmap(settings),
        build_headless_service(settings, names.ROLE_CM),
        build_headless_service(settings, names.ROLE_MM),
        build_client_service(settings),
        build_pdb(settings, names.ROLE_CM),
        build_pdb(settings, names.ROLE_MM),
        build_cm_statefulset(settings),
        build_mm_statefulset(settings, mm_replicas),
    ]
