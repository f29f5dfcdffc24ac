"""What the operator keeps of each Partition: a view read without a metadata model, and copies of
watched bodies whose strings are shared. Checked against the full resource model and against
plain JSON decoding, not against the code under test."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from hybridmq.api.resources import Partition
from hybridmq.planner.state import PartitionInfo
from hybridmq_operator import compact, observe


def _body(**meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "hybridmq.io/v1alpha1",
        "kind": "Partition",
        "metadata": {
            "name": "orders-fixed-7",
            "namespace": "prod",
            "uid": "0b5c3e0e-3f53-4b47-9d0c-2f1f0f2b3c4d",
            "resourceVersion": "4711",
            "generation": 3,
            "creationTimestamp": "2026-11-28T01:00:00Z",
            "labels": {"app.kubernetes.io/instance": "orders", "hybridmq.io/partition-type": "fixed"},
            "finalizers": ["hybridmq.io/partition-data"],
            "ownerReferences": [
                {"apiVersion": "hybridmq.io/v1alpha1", "kind": "BrokerCluster", "name": "orders"}
            ],
            **meta,
        },
        "spec": {"cluster": "orders", "type": "fixed", "replicas": 2, "unknownField": 1},
        "status": {
            "state": "Active",
            "epoch": 4,
            "primary": "orders-mm-1",
            "replicas": ["orders-mm-1", "orders-mm-0"],
            "inSync": ["orders-mm-1"],
            "replicaOffsets": {"orders-mm-1": 120, "orders-mm-0": 100},
            "logEndOffset": 120,
            "lastFailover": {"from": "orders-mm-0", "to": "orders-mm-1", "reason": "lease expired"},
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "Serving",
                    "lastTransitionTime": "2026-11-28T01:00:01Z",
                }
            ],
        },
    }


def _variants() -> list[dict[str, Any]]:
    deleting = _body(deletionTimestamp="2026-11-28T01:05:00Z", finalizers=[])
    unplaced = _body(generation=None)
    del unplaced["status"]
    empty_status = _body()
    empty_status["status"] = {}
    return [_body(), deleting, unplaced, empty_status]


@pytest.mark.parametrize("body", _variants())
def test_a_partitions_view_is_what_the_full_model_gives(body: dict[str, Any]) -> None:
    expected = PartitionInfo.from_resource(Partition.model_validate(body))
    assert observe.partition_view(body) == expected


@pytest.mark.parametrize(
    "breakage",
    [
        lambda b: b["spec"].update(replicas="two"),
        lambda b: b["spec"].pop("cluster"),
        lambda b: b.pop("spec"),
        lambda b: b["status"].update(epoch=-1),
        lambda b: b["metadata"].pop("name"),
    ],
)
def test_an_invalid_partition_has_no_view(breakage: Any) -> None:
    body = _body()
    breakage(body)
    assert observe.partition_view(body) is None


def test_the_cache_gives_the_same_view_until_the_resource_changes() -> None:
    cache = observe.PartitionCache()
    (first,) = cache.parse([_body()])
    (again,) = cache.parse([_body()])
    assert again is first
    newer = _body(resourceVersion="4712")
    newer["status"]["primary"] = "orders-mm-0"
    (third,) = cache.parse([newer])
    assert third is not first and third.status is not None and third.status.primary == "orders-mm-0"


def test_copies_of_separately_decoded_bodies_share_their_repeated_strings() -> None:
    text = json.dumps(_body())
    one, two = compact.json_copy(json.loads(text)), compact.json_copy(json.loads(text))
    assert one == two == json.loads(text)
    # The same key, label value and MM name decoded twice are one string object in the copies.
    assert next(iter(one["status"])) is next(iter(two["status"]))
    label = "app.kubernetes.io/instance"
    assert one["metadata"]["labels"][label] is two["metadata"]["labels"][label]
    assert one["status"]["replicas"][0] is two["status"]["replicas"][0]
    # Decoding alone does not share them (what the copy is for).
    three, four = json.loads(text), json.loads(text)
    assert three["status"]["replicas"][0] is not four["status"]["replicas"][0]


def test_a_copy_is_independent_of_what_it_was_made_from() -> None:
    original = _body()
    before = copy.deepcopy(original)
    copied = compact.json_copy(original)
    copied["status"]["replicas"].append("orders-mm-2")
    copied["metadata"]["labels"]["extra"] = "x"
    copied["status"]["conditions"][0]["status"] = "False"
    assert original == before
