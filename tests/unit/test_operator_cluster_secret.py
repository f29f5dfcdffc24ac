"""The cluster secret child and how the broker pods get it."""

from __future__ import annotations

import base64
from typing import Any

from hybridmq_operator import names
from hybridmq_operator.resources import (
    build_cluster_secret,
    build_cm_statefulset,
    build_mm_statefulset,
    generate_value,
)
from hybridmq_operator.settings import ClusterSettings

SETTINGS = ClusterSettings.from_body(
    {
        "apiVersion": "hybridmq.io/v1alpha1",
        "kind": "BrokerCluster",
        "metadata": {"name": "demo", "namespace": "ns1", "uid": "uid-1", "generation": 1},
        "spec": {},
    }
)


def test_the_secret_is_an_owned_immutable_child_holding_the_value() -> None:
    secret = build_cluster_secret(SETTINGS, "s3cret-value-of-enough-length")
    assert secret["kind"] == "Secret" and secret["immutable"] is True
    assert secret["metadata"]["name"] == "demo-cluster-secret"
    assert secret["metadata"]["namespace"] == "ns1"
    (owner,) = secret["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("BrokerCluster", "uid-1", True)
    assert base64.b64decode(secret["data"]["secret"]) == b"s3cret-value-of-enough-length"


def test_generated_values_are_long_and_random() -> None:
    values = {generate_value() for _ in range(20)}
    assert len(values) == 20 and min(len(v) for v in values) >= 32


def _secret_env(sts: dict[str, Any]) -> dict[str, Any]:
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    (env,) = [e for e in container["env"] if e["name"] == "HYBRIDMQ_CLUSTER_SECRET"]
    assert "value" not in env and all("secret" not in a.lower() for a in container["command"])
    return dict(env["valueFrom"])


def test_cm_and_mm_pods_read_it_from_the_secret() -> None:
    for sts in (build_cm_statefulset(SETTINGS), build_mm_statefulset(SETTINGS)):
        assert _secret_env(sts) == {
            "secretKeyRef": {"name": names.cluster_secret_name("demo"), "key": names.CLUSTER_SECRET_KEY}
        }
