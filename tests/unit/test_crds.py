"""The CRDs in crds/ are generated from hybridmq.api.resources, structural, and say what we mean."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from hybridmq.api import crdgen
from hybridmq.api.assignment import PartitionState, PartitionType
from hybridmq.api.resources import (
    BrokerCluster,
    BrokerClusterSpec,
    BrokerClusterStatus,
    Partition,
    PartitionSpec,
    PartitionStatus,
    partition_to_assignment,
)

ROOT = Path(__file__).resolve().parents[2]
CRD_DIR = ROOT / "crds"


def _load(name: str) -> dict[str, Any]:
    data = yaml.safe_load((CRD_DIR / name).read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def _schema(crd: dict[str, Any]) -> dict[str, Any]:
    (version,) = crd["spec"]["versions"]
    schema = version["schema"]["openAPIV3Schema"]
    assert isinstance(schema, dict)
    return schema


def _walk(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for name, sub in node.get("properties", {}).items():
        yield from _walk(sub, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from _walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _walk(node["additionalProperties"], f"{path}.*")


def _at(schema: dict[str, Any], dotted: str) -> dict[str, Any]:
    node = schema
    for part in dotted.strip(".").split("."):
        node = node["properties"][part]
    return node


ALL = sorted(crdgen.all_crds())


def test_generated_files_are_the_ones_checked_in() -> None:
    assert ALL == [
        "brokerclusters.hybridmq.io.yaml",
        "brokerusers.hybridmq.io.yaml",
        "partitions.hybridmq.io.yaml",
    ]
    on_disk = sorted(p.name for p in CRD_DIR.glob("*.hybridmq.io.yaml"))
    assert on_disk == ALL, "run `make crds`"
    for name, crd in crdgen.all_crds().items():
        assert (CRD_DIR / name).read_text(encoding="utf-8") == crdgen.render(crd), (
            f"crds/{name} drifted from hybridmq.api.resources: run `make crds`"
        )


def test_write_crds_round_trips(tmp_path: Path) -> None:
    written = crdgen.write_crds(tmp_path)
    assert sorted(p.name for p in written) == ALL
    for path in written:
        assert path.read_text(encoding="utf-8") == (CRD_DIR / path.name).read_text(encoding="utf-8")


@pytest.mark.parametrize("name", ALL)
def test_schema_is_structural(name: str) -> None:
    schema = _schema(_load(name))
    forbidden = {"$ref", "$defs", "anyOf", "allOf", "oneOf", "not", "title", "const"}
    for path, node in _walk(schema):
        assert not forbidden & node.keys(), f"{name}{path}: {forbidden & node.keys()}"
        assert "type" in node or node.get("x-kubernetes-int-or-string") is True, f"{name}{path}: no type"
        if node.get("type") == "object":
            props = "properties" in node
            extra = "additionalProperties" in node
            assert not (props and extra), f"{name}{path}: both properties and additionalProperties"
            # metadata is the only object left open (the API server owns its schema).
            assert props or extra or path == ".metadata", f"{name}{path}: object without fields"
        if node.get("type") == "array":
            assert isinstance(node.get("items"), dict), f"{name}{path}: array without items"
        for req in node.get("required", []):
            assert req in node.get("properties", {}), f"{name}{path}: required {req} missing"
        if "default" in node:
            assert node["default"] is not None, f"{name}{path}: null default"
    assert _at(schema, "metadata") == {"type": "object"}


@pytest.mark.parametrize(
    ("name", "kind", "short", "columns"),
    [
        (
            "brokerclusters.hybridmq.io.yaml",
            "BrokerCluster",
            "hbc",
            ["CMs", "MMs", "Partitions", "Ready", "Age"],
        ),
        (
            "partitions.hybridmq.io.yaml",
            "Partition",
            "hpart",
            ["Cluster", "Type", "State", "Primary", "Epoch", "Backlog", "Age"],
        ),
    ],
)
def test_names_subresources_and_columns(name: str, kind: str, short: str, columns: list[str]) -> None:
    crd = _load(name)
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["metadata"]["name"] == name.removesuffix(".yaml")
    spec = crd["spec"]
    assert spec["group"] == "hybridmq.io" and spec["scope"] == "Namespaced"
    assert spec["names"]["kind"] == kind
    assert spec["names"]["shortNames"] == [short]
    assert spec["names"]["categories"] == ["hybridmq"]
    (version,) = spec["versions"]
    assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
    assert version["subresources"] == {"status": {}}
    shown = [c["name"] for c in version["additionalPrinterColumns"] if not c.get("priority")]
    assert shown == columns
    schema = _schema(crd)
    for col in version["additionalPrinterColumns"]:
        path = col["jsonPath"]
        if "[" in path or path.startswith(".metadata"):
            continue
        node = _at(schema, path)  # the column points at a real field
        if col["type"] == "integer":
            assert node["type"] == "integer", path


def _rules(node: dict[str, Any]) -> dict[str, str]:
    return {r["rule"]: r["message"] for r in node.get("x-kubernetes-validations", [])}


def test_partition_validation_rules() -> None:
    schema = _schema(_load("partitions.hybridmq.io.yaml"))
    spec = _at(schema, "spec")
    assert spec["required"] == ["cluster", "type"]
    assert _at(schema, "spec.type")["enum"] == ["fixed", "on-demand"]
    assert _rules(_at(schema, "spec.type")) == {"self == oldSelf": "spec.type is immutable"}
    assert _rules(_at(schema, "spec.cluster")) == {"self == oldSelf": "spec.cluster is immutable"}
    assert _at(schema, "spec.replicas")["minimum"] == 1
    assert _at(schema, "spec.replicas")["default"] == 2
    rules = _rules(spec)
    assert "self.type == 'fixed' || !has(self.key)" in rules
    assert _at(schema, "status.state")["enum"] == [s.value for s in PartitionState]
    assert _at(schema, "status.epoch")["minimum"] == 0
    assert _at(schema, "status.lastFailover.from")["nullable"] is True
    conditions = _at(schema, "status.conditions")
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["items"]["required"] == ["type", "status"]


def test_brokercluster_defaults_and_rules() -> None:
    schema = _schema(_load("brokerclusters.hybridmq.io.yaml"))
    fixed = _at(schema, "spec.partitions.fixed")
    assert fixed["properties"]["replicas"]["default"] == 2
    assert fixed["properties"]["minInSync"]["default"] == 2
    assert fixed["properties"]["count"]["minimum"] == 0
    assert "self.minInSync <= self.replicas" in _rules(fixed)
    assert "self >= oldSelf" in _rules(fixed["properties"]["count"])
    od = _at(schema, "spec.partitions.onDemand")
    assert od["properties"]["perMessageManager"]["default"] == 1
    assert od["properties"]["acceptWritesAfterFailover"]["default"] is False
    assert _at(schema, "spec.failureDetection.leaseDurationSeconds")["default"] == 1
    # Nested objects carry their complete default, so the API server fills them in (and their CEL
    # rules, which it checks against the default, hold).
    assert _at(schema, "spec.partitions.fixed")["default"] == {"count": 3, "replicas": 2, "minInSync": 2}
    assert _at(schema, "spec.messageManagers.storage")["default"] == {"size": "1Gi", "deleteClaim": False}
    assert _at(schema, "spec.partitions")["default"]["onDemand"]["perMessageManager"] == 1
    assert _at(schema, "spec.messageManagers.storage.size")["x-kubernetes-int-or-string"] is True
    brokers = _at(schema, "status.brokers")
    assert brokers["items"]["properties"]["role"]["enum"] == ["cm", "mm"]
    assert brokers["x-kubernetes-list-map-keys"] == ["name"]


def test_schema_defaults_match_the_models() -> None:
    """What the API server fills in equals what pydantic fills in."""
    defaults = BrokerClusterSpec().model_dump(mode="json", exclude_none=True)
    schema = _at(_schema(_load("brokerclusters.hybridmq.io.yaml")), "spec")

    def check(node: dict[str, Any], value: Any, path: str) -> None:
        if isinstance(value, dict):
            for key, sub in value.items():
                check(node["properties"][key], sub, f"{path}.{key}")
        else:
            assert node.get("default") == value, path

    check(schema, defaults, "spec")


# ---- the models themselves -----------------------------------------------------------------------


def test_partition_parses_camel_case_and_dumps_it() -> None:
    obj = {
        "apiVersion": "hybridmq.io/v1alpha1",
        "kind": "Partition",
        "metadata": {"name": "demo-fixed-0", "generation": 3, "finalizers": ["hybridmq.io/partition-data"]},
        "spec": {"cluster": "demo", "type": "fixed", "replicas": 3, "minInSync": 2, "key": "orders"},
        "status": {
            "state": "Active",
            "epoch": 4,
            "primary": "demo-mm-1",
            "replicas": ["demo-mm-1", "demo-mm-0", "demo-mm-2"],
            "inSync": ["demo-mm-1", "demo-mm-0"],
            "acceptWrites": True,
            "backlog": 12,
            "lastFailover": {"from": "demo-mm-0", "to": "demo-mm-1", "reason": "pod deleted"},
        },
    }
    part = Partition.model_validate(obj)
    assert part.status is not None and part.status.in_sync == ["demo-mm-1", "demo-mm-0"]
    assert part.status.last_failover is not None and part.status.last_failover.from_ == "demo-mm-0"
    dumped = part.model_dump(mode="json", exclude_none=True)
    assert dumped["status"]["inSync"] == ["demo-mm-1", "demo-mm-0"]
    assert dumped["status"]["lastFailover"]["from"] == "demo-mm-0"
    assert dumped["spec"]["minInSync"] == 2
    a = part.to_assignment()
    assert a.name == "demo-fixed-0" and a.type == PartitionType.FIXED and a.epoch == 4
    assert a.primary == "demo-mm-1" and a.replicas == ("demo-mm-1", "demo-mm-0", "demo-mm-2")
    assert a.in_sync == ("demo-mm-1", "demo-mm-0") and a.min_in_sync == 2 and a.writable
    assert a.backups == ("demo-mm-0", "demo-mm-2")


def test_partition_without_status_is_pending() -> None:
    part = Partition(metadata={"name": "p"}, spec=PartitionSpec(cluster="c", type=PartitionType.ON_DEMAND))
    a = partition_to_assignment(part)
    assert a.state == PartitionState.PENDING and a.primary is None and not a.writable
    assert a.min_in_sync == 2
    one = Partition(metadata={"name": "q"}, spec=PartitionSpec(cluster="c", type="fixed", replicas=1))
    assert one.to_assignment().min_in_sync == 1


@pytest.mark.parametrize(
    "spec",
    [
        {"cluster": "c", "type": "sometimes"},
        {"cluster": "c", "type": "fixed", "replicas": 0},
        {"cluster": "c", "type": "on-demand", "key": "k"},
        {"cluster": "", "type": "fixed"},
        {"cluster": "c", "type": "fixed", "replicas": 1, "minInSync": 2},
    ],
)
def test_bad_partition_specs_are_refused(spec: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        PartitionSpec.model_validate(spec)


def test_brokercluster_defaults_and_bad_values() -> None:
    hbc = BrokerCluster.model_validate({"metadata": {"name": "demo"}, "spec": {}})
    p = hbc.spec.partitions
    assert (p.fixed.replicas, p.fixed.min_in_sync, p.on_demand.per_message_manager) == (2, 2, 1)
    assert p.on_demand.accept_writes_after_failover is False
    assert hbc.spec.failure_detection.lease_duration_seconds == 1
    with pytest.raises(ValidationError):
        BrokerClusterSpec.model_validate({"partitions": {"fixed": {"replicas": 1}}})  # minInSync 2 > 1
    with pytest.raises(ValidationError):
        BrokerClusterSpec.model_validate({"messageManagers": {"replicas": -1}})
    ok = BrokerClusterSpec.model_validate({"partitions": {"fixed": {"replicas": 1, "minInSync": 1}}})
    assert ok.partitions.fixed.replicas == 1


def test_broker_table_converts_to_entries() -> None:
    status = BrokerClusterStatus.model_validate(
        {"brokers": [{"name": "demo-cm-0", "role": "cm", "address": "10.0.0.1:7000", "ready": True}]}
    )
    (entry,) = status.broker_entries()
    assert entry.name == "demo-cm-0" and entry.role.value == "cm" and entry.ready


def test_status_models_have_sane_defaults() -> None:
    st = PartitionStatus()
    assert st.state == PartitionState.PENDING and st.epoch == 0 and st.primary is None
    assert st.model_dump(mode="json")["acceptWrites"] is True
