"""The operator's one Kubernetes client (pykube-ng) and the few writes it makes.

Children are written with server-side apply (field manager ``hybridmq-operator``, forced), so a
re-run is a no-op and fields other managers own (e.g. defaults) are left alone. Partition status
is written with a merge patch on the ``status`` subresource that carries the ``resourceVersion``
the planner saw, so a decision taken on a stale view fails with 409 and is re-planned instead of
being applied twice.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any

import pykube
import requests
from pykube.http import KubernetesHTTPAdapter

from hybridmq_operator import names

PLURALS: dict[str, str] = {
    "ServiceAccount": "serviceaccounts",
    "Role": "roles",
    "RoleBinding": "rolebindings",
    "ConfigMap": "configmaps",
    "Service": "services",
    "PodDisruptionBudget": "poddisruptionbudgets",
    "StatefulSet": "statefulsets",
    "Pod": "pods",
    "Node": "nodes",
    "Lease": "leases",
    "Event": "events",
    "Secret": "secrets",
    names.USER_KIND: names.USER_PLURAL,
    "NetworkPolicy": "networkpolicies",
    names.PARTITION_KIND: names.PARTITION_PLURAL,
    names.CLUSTER_KIND: names.CLUSTER_PLURAL,
}


class KubeError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def not_found(self) -> bool:
        return self.status == 404


_lock = threading.Lock()
_client: pykube.HTTPClient | None = None


def client() -> pykube.HTTPClient:
    """The process-wide client: in-cluster service account, else ``$KUBECONFIG``/~/.kube/config."""
    global _client
    with _lock:
        if _client is None:
            config = pykube.KubeConfig.from_env()
            # Enough pooled connections for the parallel writers of several clusters.
            adapter = KubernetesHTTPAdapter(config, pool_connections=4, pool_maxsize=64)
            _client = pykube.HTTPClient(config, timeout=10, http_adapter=adapter)
        return _client


def set_client(api: pykube.HTTPClient | None) -> None:
    global _client
    with _lock:
        _client = api


def _url(
    api_version: str, plural: str, namespace: str | None, name: str = "", sub: str = ""
) -> dict[str, Any]:
    url = plural
    if name:
        url += f"/{name}"
    if sub:
        url += f"/{sub}"
    kwargs: dict[str, Any] = {"version": api_version, "url": url}
    if namespace is not None:
        kwargs["namespace"] = namespace
    return kwargs


def without_managed_fields(body: Mapping[str, Any]) -> dict[str, Any]:
    """``body`` without ``metadata.managedFields`` (the server-side apply bookkeeping, which the
    operator never reads): two thirds of a Partition's size, so what is kept for thousands of
    objects (index copies, written bodies) leaves it out. A shallow copy: nothing else is shared
    with ``body`` but its values."""
    kept = {k: v for k, v in body.items() if k != "metadata"}
    meta = {k: v for k, v in (body.get("metadata") or {}).items() if k != "managedFields"}
    return {**kept, "metadata": meta}


def _check(resp: requests.Response) -> dict[str, Any]:
    if resp.status_code >= 400:
        try:
            message = str(resp.json().get("message", resp.text))
        except ValueError:
            message = resp.text
        raise KubeError(resp.status_code, message)
    if not resp.content:
        return {}
    body: dict[str, Any] = resp.json()
    return body


def get(api_version: str, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
    resp = client().get(**_url(api_version, PLURALS[kind], namespace, name))
    if resp.status_code == 404:
        return None
    return _check(resp)


def list_objects(
    api_version: str, kind: str, namespace: str | None, labels: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    params = {}
    if labels:
        params["labelSelector"] = ",".join(f"{k}={v}" for k, v in labels.items())
    resp = client().get(**_url(api_version, PLURALS[kind], namespace), params=params)
    return list(_check(resp).get("items", []))


def apply(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """Server-side apply of a whole manifest."""
    meta = manifest["metadata"]
    resp = client().patch(
        **_url(manifest["apiVersion"], PLURALS[manifest["kind"]], meta.get("namespace"), meta["name"]),
        params={"fieldManager": names.MANAGER, "force": "true"},
        headers={"Content-Type": "application/apply-patch+yaml"},
        data=json.dumps(manifest),
    )
    return _check(resp)


def create(manifest: Mapping[str, Any]) -> dict[str, Any]:
    meta = manifest["metadata"]
    resp = client().post(
        **_url(manifest["apiVersion"], PLURALS[manifest["kind"]], meta.get("namespace")),
        params={"fieldManager": names.MANAGER},
        data=json.dumps(manifest),
    )
    return _check(resp)


def merge_patch(
    api_version: str,
    kind: str,
    namespace: str | None,
    name: str,
    patch: Mapping[str, Any],
    subresource: str = "",
) -> dict[str, Any]:
    resp = client().patch(
        **_url(api_version, PLURALS[kind], namespace, name, subresource),
        params={"fieldManager": names.MANAGER},
        headers={"Content-Type": "application/merge-patch+json"},
        data=json.dumps(patch),
    )
    return _check(resp)


def json_patch(
    api_version: str, kind: str, namespace: str | None, name: str, ops: list[dict[str, Any]]
) -> dict[str, Any]:
    resp = client().patch(
        **_url(api_version, PLURALS[kind], namespace, name),
        params={"fieldManager": names.MANAGER},
        headers={"Content-Type": "application/json-patch+json"},
        data=json.dumps(ops),
    )
    return _check(resp)


def delete(api_version: str, kind: str, namespace: str | None, name: str, uid: str | None = None) -> bool:
    """Delete (background propagation); False when it was already gone. With ``uid``, only that
    object: a successor of the same name (a StatefulSet's new pod) is left alone."""
    options: dict[str, Any] = {"propagationPolicy": "Background"}
    if uid:
        options["preconditions"] = {"uid": uid}
    resp = client().delete(**_url(api_version, PLURALS[kind], namespace, name), data=json.dumps(options))
    if resp.status_code == 404 or (uid and resp.status_code == 409):
        return False
    _check(resp)
    return True
