"""The CM and MM StatefulSets.

CMs are stateless but get stable names so the broker table reads well; MMs keep their partition
logs on a per-pod volume (a volumeClaimTemplate, or an emptyDir with ``storage.type: ephemeral``).
Both start their pods in parallel and update them ``OnDelete``: ordering between brokers, and when a
pod of a new template may replace an old one, is the operator's business (``handlers/roll.py``: one
pod at a time, an MM only once its replicas moved away and the previous one caught up), not the
StatefulSet controller's.
"""

from typing import Any

from hybridmq_operator import names
from hybridmq_operator.resources.common import Manifest, metadata
from hybridmq_operator.resources.pod_template import pod_template
from hybridmq_operator.settings import ClusterSettings


def _statefulset(settings: ClusterSettings, role: str, replicas: int) -> Manifest:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": metadata(settings, names.statefulset_name(settings.name, role), role),
        "spec": {
            "replicas": replicas,
            "serviceName": names.headless_service_name(settings.name, role),
            "podManagementPolicy": "Parallel",
            "updateStrategy": {"type": "OnDelete"},
            "selector": {"matchLabels": names.selector_labels(settings.name, role)},
            "template": pod_template(settings, role),
        },
    }


def build_cm_statefulset(settings: ClusterSettings) -> Manifest:
    return _statefulset(settings, names.ROLE_CM, settings.cm_replicas)


def volume_claim_template(settings: ClusterSettings) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": settings.storage_size}},
    }
    if settings.storage_class:
        spec["storageClassName"] = settings.storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": names.DATA_VOLUME,
            "labels": names.selector_labels(settings.name, names.ROLE_MM),
        },
        "spec": spec,
    }


def build_mm_statefulset(settings: ClusterSettings, replicas: int | None = None) -> Manifest:
    """``replicas`` overrides the spec while a scale-down waits for the evacuation of its MMs."""
    manifest = _statefulset(settings, names.ROLE_MM, settings.mm_replicas if replicas is None else replicas)
    if settings.storage_type != "ephemeral":
        manifest["spec"]["volumeClaimTemplates"] = [volume_claim_template(settings)]
        # Data of an MM that a scale-down removed was evacuated first; when the cluster is deleted
        # the claims stay unless storage.deleteClaim says otherwise (Strimzi's policy).
        manifest["spec"]["persistentVolumeClaimRetentionPolicy"] = {
            "whenDeleted": "Delete" if settings.delete_claim else "Retain",
            "whenScaled": "Delete",
        }
    return manifest
