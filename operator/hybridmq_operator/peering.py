"""Kopf peering for operator HA: the CRDs Kopf needs and the peering object HybridMQ uses.

Run each operator replica with ``--peering hybridmq`` (and distinct ``--priority`` values): the
highest-priority live operator works, the others pause until its peering record expires
(``HYBRIDMQ_OPERATOR_PEERING_LIFETIME``, default 15 s). ``python -m hybridmq_operator.peering``
prints the manifests (CRDs + a namespaced and a cluster-wide peering object) for the chart.
"""

from __future__ import annotations

import sys
from typing import Any

import yaml

PEERING_NAME = "hybridmq"


def _crd(kind: str, plural: str, scope: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.kopf.dev"},
        "spec": {
            "scope": scope,
            "group": "kopf.dev",
            "names": {"kind": kind, "plural": plural, "singular": plural[:-1]},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                            },
                        }
                    },
                }
            ],
        },
    }


PEERING_CRDS: list[dict[str, Any]] = [
    _crd("ClusterKopfPeering", "clusterkopfpeerings", "Cluster"),
    _crd("KopfPeering", "kopfpeerings", "Namespaced"),
]


def peering_object(namespace: str | None = None, name: str = PEERING_NAME) -> dict[str, Any]:
    """A KopfPeering in ``namespace`` (namespaced operators) or a ClusterKopfPeering."""
    if namespace is None:
        return {"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering", "metadata": {"name": name}}
    return {
        "apiVersion": "kopf.dev/v1",
        "kind": "KopfPeering",
        "metadata": {"name": name, "namespace": namespace},
    }


if __name__ == "__main__":
    yaml.safe_dump_all([*PEERING_CRDS, peering_object()], sys.stdout, sort_keys=False)
