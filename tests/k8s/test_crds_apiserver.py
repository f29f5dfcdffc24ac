"""The generated CRDs on a real API server: good objects are accepted and defaulted, bad ones are
refused with a clear message, and `kubectl get` shows the printer columns."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from localcluster import LocalCluster

pytestmark = pytest.mark.cluster

REPO_ROOT = Path(__file__).resolve().parents[2]
CRDS = ["brokerclusters.hybridmq.io", "partitions.hybridmq.io", "brokerusers.hybridmq.io"]


@pytest.fixture(scope="module")
def crds(local_cluster: LocalCluster) -> LocalCluster:
    local_cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(REPO_ROOT / "crds"))
    local_cluster.kubectl(
        "wait", "--for", "condition=Established", "--timeout=60s", *(f"crd/{name}" for name in CRDS)
    )
    return local_cluster


def hbc(name: str, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "hybridmq.io/v1alpha1",
        "kind": "BrokerCluster",
        "metadata": {"name": name},
        "spec": spec if spec is not None else {},
    }


def hpart(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "hybridmq.io/v1alpha1",
        "kind": "Partition",
        "metadata": {"name": name},
        "spec": {"cluster": "demo", **spec},
    }


def hbu(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "hybridmq.io/v1alpha1",
        "kind": "BrokerUser",
        "metadata": {"name": name},
        "spec": {"cluster": "demo", **spec},
    }


def create(cluster: LocalCluster, namespace: str, obj: dict[str, Any]) -> tuple[bool, str]:
    result = cluster.kubectl("create", "-n", namespace, "-f", "-", input=yaml.safe_dump(obj), check=False)
    return result.returncode == 0, result.stderr


def get(cluster: LocalCluster, namespace: str, kind: str, name: str) -> dict[str, Any]:
    out = cluster.kubectl("get", kind, name, "-n", namespace, "-o", "json").stdout
    data = json.loads(out)
    assert isinstance(data, dict)
    return data


def patch(
    cluster: LocalCluster, namespace: str, kind: str, name: str, body: dict[str, Any]
) -> tuple[bool, str]:
    result = cluster.kubectl(
        "patch", kind, name, "-n", namespace, "--type=merge", "-p", json.dumps(body), check=False
    )
    return result.returncode == 0, result.stderr


def test_good_objects_are_accepted_and_defaulted(crds: LocalCluster, cluster_namespace: str) -> None:
    ok, err = create(crds, cluster_namespace, hbc("demo"))
    assert ok, err
    spec = get(crds, cluster_namespace, "hbc", "demo")["spec"]
    assert spec["partitions"]["fixed"] == {"count": 3, "replicas": 2, "minInSync": 2}
    assert spec["partitions"]["onDemand"]["perMessageManager"] == 1
    assert spec["partitions"]["onDemand"]["acceptWritesAfterFailover"] is False
    assert spec["messageManagers"]["storage"]["size"] == "1Gi"
    assert spec["failureDetection"]["leaseDurationSeconds"] == 1

    ok, err = create(crds, cluster_namespace, hpart("demo-fixed-0", type="fixed", key="orders"))
    assert ok, err
    ok, err = create(crds, cluster_namespace, hpart("demo-od-1", type="on-demand", replicas=1))
    assert ok, err
    assert get(crds, cluster_namespace, "hpart", "demo-fixed-0")["spec"]["replicas"] == 2


def test_bad_objects_are_refused_with_a_clear_message(crds: LocalCluster, cluster_namespace: str) -> None:
    cases = [
        (hpart("p1", type="sometimes"), 'Unsupported value: "sometimes"'),
        (hpart("p2", type="fixed", replicas=-1), "should be greater than or equal to 1"),
        (hpart("p3", type="fixed", replicas=0), "should be greater than or equal to 1"),
        (hpart("p4", type="on-demand", key="k"), "spec.key is only allowed when spec.type is fixed"),
        (hpart("p5", type="fixed", replicas=1, minInSync=2), "spec.minInSync must be <= spec.replicas"),
        ({**hpart("p6", type="fixed"), "spec": {"type": "fixed"}}, "spec.cluster: Required value"),
        (hbc("b1", {"partitions": {"fixed": {"count": -1}}}), "should be greater than or equal to 0"),
        (
            hbc("b2", {"partitions": {"fixed": {"replicas": 1}}}),
            "partitions.fixed.minInSync must be <= replicas",
        ),
        (hbc("b3", {"messageManagers": {"replicas": -3}}), "should be greater than or equal to 0"),
        (hbc("b4", {"imagePullPolicy": "Sometimes"}), 'Unsupported value: "Sometimes"'),
    ]
    for obj, message in cases:
        ok, err = create(crds, cluster_namespace, obj)
        assert not ok, f"{obj['metadata']['name']} was accepted"
        assert message in err, err


def test_clusters_that_can_never_run_are_refused(crds: LocalCluster, cluster_namespace: str) -> None:
    cases = [
        # Fewer MMs than the copies a write needs: no write could ever be acknowledged.
        (
            hbc("n1", {"messageManagers": {"replicas": 1}}),
            "partitions.fixed.minInSync must be <= messageManagers.replicas",
        ),
        (hbc("n2", {"partitions": {"fixed": {"count": 10000}}}), "should be less than or equal to 1000"),
        (
            hbc(
                "n3",
                {
                    "messageManagers": {"replicas": 100},
                    "partitions": {"fixed": {"count": 1000}, "onDemand": {"perMessageManager": 16}},
                },
            ),
            "at most 2000 partitions per cluster",
        ),
        (hbc("n5", {"messageManagers": {"storage": {"size": "-1Gi"}}}), "must be a positive quantity"),
        (hbc("n6", {"messageManagers": {"storage": {"size": "lots"}}}), "must be a positive quantity"),
        (hbc("n7", {"messageManagers": {"storage": {"size": 0}}}), "must be a positive quantity"),
        (hbc("x" * 50), "metadata.name must be at most 49 characters"),
    ]
    for obj, message in cases:
        ok, err = create(crds, cluster_namespace, obj)
        assert not ok, f"{obj['metadata']['name']} was accepted"
        assert message in err, err
    # The limits themselves are fine, and scaling down to minInSync MMs too.
    for obj in (
        hbc(
            "y" * 49,
            {"partitions": {"fixed": {"count": 1000}}, "messageManagers": {"storage": {"size": 1073741824}}},
        ),
        hbc("m1", {"messageManagers": {"replicas": 1}, "partitions": {"fixed": {"minInSync": 1}}}),
        hbc("m0", {"messageManagers": {"replicas": 0}}),
    ):
        ok, err = create(crds, cluster_namespace, obj)
        assert ok, err
    ok, err = patch(
        crds, cluster_namespace, "hbc", "m1", {"spec": {"partitions": {"fixed": {"minInSync": 2}}}}
    )
    assert not ok and "must be <= messageManagers.replicas" in err, err


def test_immutable_fields_and_shrinking_fixed_count(crds: LocalCluster, cluster_namespace: str) -> None:
    ok, err = create(crds, cluster_namespace, hpart("p", type="fixed"))
    assert ok, err
    ok, err = patch(crds, cluster_namespace, "hpart", "p", {"spec": {"type": "on-demand"}})
    assert not ok and "spec.type is immutable" in err, err
    ok, err = patch(crds, cluster_namespace, "hpart", "p", {"spec": {"cluster": "other"}})
    assert not ok and "spec.cluster is immutable" in err, err
    ok, err = patch(crds, cluster_namespace, "hpart", "p", {"spec": {"replicas": 3}})
    assert ok, err

    ok, err = create(crds, cluster_namespace, hbc("demo", {"partitions": {"fixed": {"count": 4}}}))
    assert ok, err
    ok, err = patch(crds, cluster_namespace, "hbc", "demo", {"spec": {"partitions": {"fixed": {"count": 6}}}})
    assert ok, err
    ok, err = patch(crds, cluster_namespace, "hbc", "demo", {"spec": {"partitions": {"fixed": {"count": 2}}}})
    assert not ok and "cannot be decreased" in err, err


def test_status_subresource_and_printer_columns(crds: LocalCluster, cluster_namespace: str) -> None:
    ok, err = create(crds, cluster_namespace, hpart("demo-fixed-0", type="fixed"))
    assert ok, err
    status = {
        "status": {
            "state": "Active",
            "epoch": 3,
            "primary": "demo-mm-1",
            "replicas": ["demo-mm-1", "demo-mm-0"],
            "inSync": ["demo-mm-1", "demo-mm-0"],
            "backlog": 42,
            "lastFailover": {"from": "demo-mm-0", "to": "demo-mm-1", "reason": "pod deleted"},
        }
    }
    # The main resource ignores status; the status subresource takes it.
    patch(crds, cluster_namespace, "hpart", "demo-fixed-0", status)
    assert "status" not in get(crds, cluster_namespace, "hpart", "demo-fixed-0")
    result = crds.kubectl(
        "patch", "hpart", "demo-fixed-0", "-n", cluster_namespace, "--subresource=status",
        "--type=merge", "-p", json.dumps(status),
    )  # fmt: skip
    assert result.returncode == 0
    stored = get(crds, cluster_namespace, "hpart", "demo-fixed-0")["status"]
    assert stored["epoch"] == 3 and stored["lastFailover"]["from"] == "demo-mm-0"
    assert stored["acceptWrites"] is True  # defaulted

    table = crds.kubectl("get", "hpart", "-n", cluster_namespace).stdout.splitlines()
    assert table[0].split() == ["NAME", "CLUSTER", "TYPE", "STATE", "PRIMARY", "EPOCH", "BACKLOG", "AGE"]
    assert table[1].split()[:7] == ["demo-fixed-0", "demo", "fixed", "Active", "demo-mm-1", "3", "42"]

    ok, err = create(crds, cluster_namespace, hbc("demo"))
    assert ok, err
    header = crds.kubectl("get", "hbc", "-n", cluster_namespace).stdout.splitlines()[0].split()
    assert header == ["NAME", "CMS", "MMS", "PARTITIONS", "READY", "AGE"]
    # The category lists both kinds.
    names = crds.kubectl("get", "hybridmq", "-n", cluster_namespace, "-o", "name").stdout.split()
    assert "brokercluster.hybridmq.io/demo" in names and "partition.hybridmq.io/demo-fixed-0" in names


def test_tls_and_broker_users_are_validated(crds: LocalCluster, cluster_namespace: str) -> None:
    ok, err = create(crds, cluster_namespace, hbc("tls-default"))
    assert ok, err
    assert get(crds, cluster_namespace, "hbc", "tls-default")["spec"]["tls"] == {"enabled": True}
    cases = [
        (
            hbc("tls-off-with-secret", {"tls": {"enabled": False, "secretName": "certs"}}),
            "tls.secretName names the certificates of a TLS listener: it needs tls.enabled true",
        ),
        (
            hbu("u1", acls=[{"destination": "queue:*", "operations": ["delete"]}]),
            'Unsupported value: "delete"',
        ),
        (hbu("u2", acls=[{"destination": "queue:*", "operations": []}]), "should have at least 1 items"),
        (hbu("u3", username="has space"), "should match"),
        ({**hbu("u4"), "spec": {"acls": []}}, "spec.cluster: Required value"),
    ]
    for obj, message in cases:
        ok, err = create(crds, cluster_namespace, obj)
        assert not ok, f"{obj['metadata']['name']} was accepted"
        assert message in err, err
    ok, err = create(
        crds, cluster_namespace, hbu("alice", acls=[{"destination": "queue:a.*", "operations": ["produce"]}])
    )
    assert ok, err
    ok, err = patch(crds, cluster_namespace, "hbu", "alice", {"spec": {"cluster": "other"}})
    assert not ok and "spec.cluster is immutable" in err, err
    out = crds.kubectl("get", "hbu", "-n", cluster_namespace).stdout
    assert all(col in out.splitlines()[0] for col in ("CLUSTER", "USERNAME", "READY"))
