"""Generate the CustomResourceDefinitions in ``crds/`` from the models in ``hybridmq.api.resources``.

    python -m hybridmq.api.crdgen crds/

Pydantic's JSON schema (draft 2020-12) is turned into a *structural* OpenAPI v3 schema, the dialect
the API server accepts: ``$ref`` inlined, ``anyOf [X, null]`` turned into ``X`` with
``nullable: true``, ``str | int`` into ``x-kubernetes-int-or-string``, titles and null defaults
dropped, ``additionalProperties: false`` dropped (unknown fields are pruned instead), the CEL rules
(``x-kubernetes-validations``) and defaults kept.
"""

from __future__ import annotations

import copy
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from hybridmq.api.resources import (
    CLUSTER_NAME_LIMIT,
    GROUP,
    USERNAME_PATTERN,
    VERSION,
    BrokerCluster,
    BrokerClusterSpec,
    BrokerClusterStatus,
    BrokerUser,
    BrokerUserSpec,
    BrokerUserStatus,
    Partition,
    PartitionSpec,
    PartitionStatus,
)

__all__ = ["all_crds", "brokercluster_crd", "openapi_schema", "partition_crd", "render", "write_crds"]

Schema = dict[str, Any]

# Keys of the JSON schema we copy as they are (after converting their sub-schemas).
_PASSTHROUGH = {
    "type",
    "format",
    "description",
    "default",
    "enum",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "uniqueItems",
    "required",
    "nullable",
    "x-kubernetes-validations",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
    "x-kubernetes-int-or-string",
    "x-kubernetes-preserve-unknown-fields",
}
# Keys we drop on purpose.
_DROPPED = {"title", "$defs", "additionalProperties", "examples"}


class SchemaError(ValueError):
    """The model cannot be expressed as a structural schema."""


def _resolve(node: Schema, defs: Schema) -> Schema:
    """Inline a ``$ref`` (siblings of the ref win) and a single-element ``allOf``."""
    if "allOf" in node and len(node["allOf"]) == 1:
        merged = {k: v for k, v in node.items() if k != "allOf"}
        node = {**_resolve(node["allOf"][0], defs), **merged}
    if "$ref" in node:
        ref: str = node["$ref"]
        prefix = "#/$defs/"
        if not ref.startswith(prefix):
            raise SchemaError(f"unsupported $ref {ref!r}")
        target = defs[ref[len(prefix) :]]
        siblings = {k: v for k, v in node.items() if k != "$ref"}
        node = {**_resolve(target, defs), **siblings}
    return node


def _convert(node: Schema, defs: Schema, path: str) -> Schema:
    node = _resolve(node, defs)
    if "anyOf" in node:
        variants = [_resolve(v, defs) for v in node["anyOf"]]
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        nullable = any(v.get("type") == "null" for v in variants)
        variants = [v for v in variants if v.get("type") != "null"]
        types = sorted(str(v.get("type")) for v in variants)
        if len(variants) == 1:
            inner = _convert({**variants[0], **rest}, defs, path)
        elif types == ["integer", "string"]:
            inner = {k: v for k, v in rest.items() if k in _PASSTHROUGH and k != "type"}
            inner["x-kubernetes-int-or-string"] = True
            inner = _convert(inner, defs, path)
        else:
            raise SchemaError(f"{path}: anyOf of {types} is not structural")
        if nullable:
            inner["nullable"] = True
            if inner.get("default", 0) is None:
                del inner["default"]
        return _ordered(inner)
    if "const" in node:
        node = {**{k: v for k, v in node.items() if k != "const"}, "enum": [node["const"]]}
    out: Schema = {}
    for key, value in node.items():
        if key in _DROPPED:
            continue
        if key == "properties":
            out["properties"] = {name: _convert(sub, defs, f"{path}.{name}") for name, sub in value.items()}
        elif key == "items":
            out["items"] = _convert(value, defs, f"{path}[]")
        elif key == "exclusiveMinimum":
            out["minimum"] = value
            out["exclusiveMinimum"] = True
        elif key == "exclusiveMaximum":
            out["maximum"] = value
            out["exclusiveMaximum"] = True
        elif key in _PASSTHROUGH:
            out[key] = copy.deepcopy(value)
        else:
            raise SchemaError(f"{path}: unsupported JSON schema keyword {key!r}")
    # Maps (dict[str, X]): keep the value schema, which structural schemas allow without properties.
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        out["additionalProperties"] = _convert(extra, defs, f"{path}.*")
    if "default" in out and out["default"] is None:
        del out["default"]
    if "type" not in out and not out.get("x-kubernetes-int-or-string"):
        if "properties" in out:
            out["type"] = "object"
        elif "enum" in out and all(isinstance(v, str) for v in out["enum"]):
            out["type"] = "string"
        else:
            raise SchemaError(f"{path}: no type")
    if out.get("type") == "null":
        raise SchemaError(f"{path}: a field that can only be null")
    return _ordered(out)


_ORDER = [
    "description",
    "type",
    "format",
    "nullable",
    "x-kubernetes-int-or-string",
    "enum",
    "default",
    "minimum",
    "exclusiveMinimum",
    "maximum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "required",
    "properties",
    "additionalProperties",
    "items",
]


def _ordered(schema: Schema) -> Schema:
    """Stable, readable key order: the known keys first, then the x- extensions alphabetically."""
    keys = [k for k in _ORDER if k in schema] + sorted(k for k in schema if k not in _ORDER)
    return {k: schema[k] for k in keys}


def openapi_schema(model: type[BaseModel]) -> Schema:
    """The structural OpenAPI v3 schema of ``model`` (camelCase property names)."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.get("$defs", {})
    return _convert(raw, defs, model.__name__)


def _root_schema(
    spec: type[BaseModel],
    status: type[BaseModel],
    description: str,
    rules: tuple[tuple[str, str], ...] = (),
) -> Schema:
    root: Schema = {
        "description": description,
        "type": "object",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": openapi_schema(spec),
            "status": openapi_schema(status),
        },
    }
    if rules:
        # Root-level rules may read metadata.name (and nothing else of metadata).
        root["x-kubernetes-validations"] = [{"rule": r, "message": m} for r, m in rules]
    return root


@dataclass(frozen=True)
class _Resource:
    """What one CRD is made of: the resource (its names), its spec and status models, a
    description, root-level CEL rules (rule, message) and the printer columns as rows of
    (name, type, JSON path, description[, priority]); Age is appended to every table."""

    resource: type[BrokerCluster | Partition | BrokerUser]
    spec: type[BaseModel]
    status: type[BaseModel]
    description: str
    columns: tuple[tuple[Any, ...], ...]
    rules: tuple[tuple[str, str], ...] = ()


def _column(name: str, type_: str, path: str, description: str, priority: int = 0) -> Schema:
    col: Schema = {"name": name, "type": type_, "jsonPath": path, "description": description}
    if priority:
        col["priority"] = priority
    return col


_AGE = ("Age", "date", ".metadata.creationTimestamp", "Time since creation.")


def _condition(type_: str, field: str = "status") -> str:
    return f'.status.conditions[?(@.type=="{type_}")].{field}'


def _crd(r: _Resource) -> Schema:
    kind, plural = r.resource.KIND, r.resource.PLURAL
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{GROUP}",
            "labels": {"app.kubernetes.io/part-of": "hybridmq"},
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": r.resource.SINGULAR,
                "shortNames": list(r.resource.SHORT_NAMES),
                "categories": ["hybridmq"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [_column(*row) for row in (*r.columns, _AGE)],
                    "schema": {"openAPIV3Schema": _root_schema(r.spec, r.status, r.description, r.rules)},
                }
            ],
        },
    }


_BROKERCLUSTER = _Resource(
    BrokerCluster,
    BrokerClusterSpec,
    BrokerClusterStatus,
    "A HybridMQ cluster: Connection Managers, Message Managers and their partitions.",
    rules=(
        (
            f"self.metadata.name.size() <= {CLUSTER_NAME_LIMIT}",
            f"metadata.name must be at most {CLUSTER_NAME_LIMIT} characters: the names and "
            "labels of the cluster's pods and Services derive from it (63 at most)",
        ),
    ),
    columns=(
        ("CMs", "integer", ".status.readyConnectionManagers", "Ready Connection Managers."),
        ("MMs", "integer", ".status.readyMessageManagers", "Ready Message Managers."),
        ("Partitions", "integer", ".status.partitions.total", "Partitions of the cluster."),
        ("Ready", "string", _condition("Ready"), "Cluster is ready."),
        ("Degraded", "string", _condition("Degraded"), "Running with less redundancy than asked for.", 1),
        (
            "Last-Failover",
            "number",
            ".status.lastFailoverSeconds",
            "Seconds the last failover or handoff took, until every partition had a new primary.",
            1,
        ),
        (
            "Rolling",
            "string",
            _condition("Rolling", "reason"),
            "Where the roll of the broker pods stands (Done when every pod runs the current spec).",
            1,
        ),
        ("Image", "string", ".spec.image", "Broker image.", 1),
    ),
)

_PARTITION = _Resource(
    Partition,
    PartitionSpec,
    PartitionStatus,
    "One partition of a BrokerCluster: fixed (keeps identity and order) or on-demand "
    "(disposable). Its status is the operator's placement decision.",
    columns=(
        ("Cluster", "string", ".spec.cluster", "The BrokerCluster."),
        ("Type", "string", ".spec.type", "fixed or on-demand."),
        ("State", "string", ".status.state", "Pending, Active, Migrating, Draining, Drained."),
        ("Primary", "string", ".status.primary", "MM holding the primary copy."),
        ("Epoch", "integer", ".status.epoch", "Grows on each primary change."),
        ("Backlog", "integer", ".status.backlog", "Messages not yet consumed."),
        ("Replicas", "string", ".status.replicas", "Replicas in rank order.", 1),
        ("In-Sync", "string", ".status.inSync", "Replicas caught up.", 1),
        ("Producers", "integer", ".status.producers", "Attached producers.", 1),
    ),
)

_BROKERUSER = _Resource(
    BrokerUser,
    BrokerUserSpec,
    BrokerUserStatus,
    "A client user of a BrokerCluster: its password (a Secret) and its ACLs per destination "
    "pattern; the operator keeps the CMs in sync.",
    rules=(
        (
            f"has(self.spec.username) || self.metadata.name.matches('{USERNAME_PATTERN}')",
            "metadata.name is the user name when spec.username is unset: letters, digits, "
            "'.', '_', '@', '-', at most 64 characters",
        ),
    ),
    columns=(
        ("Cluster", "string", ".spec.cluster", "The BrokerCluster."),
        ("Username", "string", ".status.username", "The name clients log in with."),
        ("Ready", "string", _condition("Ready"), "Admitted by the CMs."),
        ("Reason", "string", _condition("Ready", "reason"), "Why (not).", 1),
    ),
)


def brokercluster_crd() -> Schema:
    return _crd(_BROKERCLUSTER)


def partition_crd() -> Schema:
    return _crd(_PARTITION)


def brokeruser_crd() -> Schema:
    return _crd(_BROKERUSER)


def all_crds() -> dict[str, Schema]:
    """File name -> CRD manifest."""
    crds = [brokercluster_crd(), partition_crd(), brokeruser_crd()]
    return {f"{crd['metadata']['name']}.yaml": crd for crd in crds}


_HEADER = "# Generated by `python -m hybridmq.api.crdgen crds/` from hybridmq.api.resources. Do not edit.\n"


def render(crd: Schema) -> str:
    return _HEADER + yaml.safe_dump(crd, sort_keys=False, default_flow_style=False, width=100)


def write_crds(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, crd in all_crds().items():
        path = directory / name
        path.write_text(render(crd), encoding="utf-8")
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    """``python -m hybridmq.api.crdgen DIR [DIR ...]``: write the CRDs into each directory."""
    args = sys.argv[1:] if argv is None else argv
    if not args or any(a.startswith("-") for a in args):
        print("usage: python -m hybridmq.api.crdgen <directory> [<directory> ...]", file=sys.stderr)
        return 2
    for directory in args:
        for path in write_crds(Path(directory)):
            print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
