"""A container's environment: env (value, valueFrom), envFrom, and the in-cluster service variables."""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from localcluster.agent import quantity
from localcluster.agent.kube import JSON, Kube

_VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.\-]*)\)")


class ConfigError(Exception):
    """The container's configuration cannot be resolved (kubelet: CreateContainerConfigError)."""


@dataclass(frozen=True)
class PodContext:
    """What the downward API can expose about a pod besides its manifest."""

    pod: JSON
    pod_ip: str
    host_ip: str
    node_allocatable: Mapping[str, str]


def expand(value: str, env: Mapping[str, str]) -> str:
    """Kubernetes $(VAR) expansion: defined variables are replaced, $$ escapes a dollar."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env[name] if name in env else match.group(0)

    return _VAR_REF.sub(replace, value)


def field_value(ctx: PodContext, field_path: str) -> str:
    """The value of a downward-API fieldRef."""
    meta: JSON = ctx.pod.get("metadata", {})
    spec: JSON = ctx.pod.get("spec", {})
    for prefix, source in (("metadata.labels", "labels"), ("metadata.annotations", "annotations")):
        match = re.fullmatch(re.escape(prefix) + r"\['(.+)'\]", field_path)
        if match:
            return str(meta.get(source, {}).get(match.group(1), ""))
        if field_path == prefix:
            items = sorted(meta.get(source, {}).items())
            return "\n".join(f'{k}="{v}"' for k, v in items)
    simple: dict[str, Any] = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName", "default"),
        "status.hostIP": ctx.host_ip,
        "status.hostIPs": ctx.host_ip,
        "status.podIP": ctx.pod_ip,
        "status.podIPs": ctx.pod_ip,
    }
    if field_path not in simple:
        raise ConfigError(f"unsupported fieldRef fieldPath {field_path!r}")
    return str(simple[field_path] or "")


def resource_value(ctx: PodContext, ref: JSON, default_container: str = "") -> str:
    """The value of a resourceFieldRef (limits default to the node's allocatable)."""
    name = ref.get("containerName") or default_container
    resource: str = ref["resource"]
    containers = ctx.pod["spec"].get("containers", []) + ctx.pod["spec"].get("initContainers", [])
    container: JSON = next((c for c in containers if c["name"] == name), {})
    kind, _, res = resource.partition(".")
    resources = container.get("resources", {})
    value = resources.get(kind, {}).get(res)
    if value is None and kind == "requests":
        value = resources.get("limits", {}).get(res)
    if value is None:
        value = ctx.node_allocatable.get(res, "0")
    return str(quantity.divide_ceil(value, ref.get("divisor", 1)))


def _object(kube: Kube, kind: str, namespace: str, name: str, optional: bool) -> JSON | None:
    obj = kube.get_or_none(f"/api/v1/namespaces/{namespace}/{kind}s/{name}")
    if obj is None and not optional:
        raise ConfigError(f'{kind} "{name}" not found')
    return obj


def object_data(obj: JSON, kind: str) -> dict[str, str]:
    """The decoded string data of a ConfigMap or Secret."""
    if kind == "secret":
        data = {k: base64.b64decode(v).decode("utf-8", "replace") for k, v in obj.get("data", {}).items()}
        data.update(obj.get("stringData", {}))
        return data
    result = dict(obj.get("data", {}))
    result.update(
        {k: base64.b64decode(v).decode("utf-8", "replace") for k, v in obj.get("binaryData", {}).items()}
    )
    return result


def _key_ref(kube: Kube, namespace: str, ref: JSON, kind: str) -> str | None:
    optional = bool(ref.get("optional", False))
    obj = _object(kube, kind, namespace, ref["name"], optional)
    if obj is None:
        return None
    data = object_data(obj, kind)
    if ref["key"] not in data:
        if optional:
            return None
        raise ConfigError(f"couldn't find key {ref['key']} in {kind.capitalize()} {namespace}/{ref['name']}")
    return data[ref["key"]]


def service_env(api_host: str, api_port: int) -> dict[str, str]:
    """The variables of the `kubernetes` Service, pointing at the local API server."""
    url = f"tcp://{api_host}:{api_port}"
    return {
        "KUBERNETES_SERVICE_HOST": api_host,
        "KUBERNETES_SERVICE_PORT": str(api_port),
        "KUBERNETES_SERVICE_PORT_HTTPS": str(api_port),
        "KUBERNETES_PORT": url,
        "KUBERNETES_PORT_443_TCP": url,
        "KUBERNETES_PORT_443_TCP_PROTO": "tcp",
        "KUBERNETES_PORT_443_TCP_PORT": str(api_port),
        "KUBERNETES_PORT_443_TCP_ADDR": api_host,
    }


def container_env(kube: Kube, ctx: PodContext, container: JSON, base: Mapping[str, str]) -> dict[str, str]:
    """The full environment of `container`: `base` (PATH, HOME, service vars), envFrom, then env."""
    namespace = ctx.pod["metadata"]["namespace"]
    env = dict(base)
    env["HOSTNAME"] = ctx.pod["spec"].get("hostname") or ctx.pod["metadata"]["name"]
    for source in container.get("envFrom", []):
        prefix = source.get("prefix", "")
        for kind in ("configMap", "secret"):
            ref = source.get(f"{kind}Ref")
            if ref is None:
                continue
            api_kind = "configmap" if kind == "configMap" else "secret"
            obj = _object(kube, api_kind, namespace, ref["name"], bool(ref.get("optional", False)))
            if obj is not None:
                for key, data_value in object_data(obj, api_kind).items():
                    env[prefix + key] = data_value
    for var in container.get("env", []):
        name = var["name"]
        if "valueFrom" not in var:
            env[name] = expand(var.get("value", ""), env)
            continue
        source = var["valueFrom"]
        value: str | None = None
        if "fieldRef" in source:
            value = field_value(ctx, source["fieldRef"]["fieldPath"])
        elif "resourceFieldRef" in source:
            value = resource_value(ctx, source["resourceFieldRef"], container["name"])
        elif "secretKeyRef" in source:
            value = _key_ref(kube, namespace, source["secretKeyRef"], "secret")
        elif "configMapKeyRef" in source:
            value = _key_ref(kube, namespace, source["configMapKeyRef"], "configmap")
        else:
            raise ConfigError(f"unsupported valueFrom for {name}: {sorted(source)}")
        if value is not None:
            env[name] = value
    return env
