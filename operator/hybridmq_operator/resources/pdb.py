"""PodDisruptionBudgets: voluntary evictions take at most one CM and one MM at a time."""

from hybridmq_operator import names
from hybridmq_operator.resources.common import Manifest, metadata
from hybridmq_operator.settings import ClusterSettings


def build_pdb(settings: ClusterSettings, role: str) -> Manifest:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(settings, names.pdb_name(settings.name, role), role),
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": names.selector_labels(settings.name, role)},
        },
    }
