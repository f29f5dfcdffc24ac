"""The operator runs with exactly ``hybridmq_operator.rbac.OPERATOR_RULES`` (what the chart grants):
it brings a BrokerCluster up and fails a partition over; a verb it does not need is denied; the
brokers' own Role is only what they use."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from operator_harness import (
    Kube,
    OperatorProcess,
    apply_crds,
    poll,
    sample_cluster,
    teardown,
    wait_cluster_up,
)

from hybridmq_operator.rbac import OPERATOR_RULES
from localcluster import LocalCluster

pytestmark = pytest.mark.cluster


def service_account_kubeconfig(cluster: LocalCluster, namespace: str, sa: str, path: Path) -> Path:
    token = cluster.kubectl("-n", namespace, "create", "token", sa, "--duration=2h").stdout.strip()
    admin = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    config: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": admin["clusters"],
        "users": [{"name": sa, "user": {"token": token}}],
        "contexts": [{"name": sa, "context": {"cluster": admin["clusters"][0]["name"], "user": sa}}],
        "current-context": sa,
    }
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def restricted_operator(local_cluster: LocalCluster, cluster_namespace: str) -> Iterator[OperatorProcess]:
    apply_crds(local_cluster)
    ns = cluster_namespace
    role = f"hybridmq-operator-{uuid.uuid4().hex[:5]}"
    manifests = [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "hybridmq-operator", "namespace": ns},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": role},
            "rules": OPERATOR_RULES,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": role},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": "hybridmq-operator", "namespace": ns}],
        },
    ]
    local_cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(manifests))
    kubeconfig = service_account_kubeconfig(
        local_cluster, ns, "hybridmq-operator", local_cluster.directory / f"operator-{ns}.kubeconfig"
    )
    proc = OperatorProcess(local_cluster, ns, extra_env={"KUBECONFIG": str(kubeconfig)}).start()
    yield proc
    teardown(Kube(local_cluster, ns), proc)
    local_cluster.kubectl("delete", "clusterrole,clusterrolebinding", role, "--ignore-not-found", check=False)


def can_i(cluster: LocalCluster, ns: str, verb: str, resource: str) -> bool:
    who = f"system:serviceaccount:{ns}:hybridmq-operator"
    out = cluster.kubectl("auth", "can-i", verb, resource, "-n", ns, f"--as={who}", check=False).stdout
    return out.strip() == "yes"


def test_operator_works_with_its_least_privilege_rbac(
    local_cluster: LocalCluster, cluster_namespace: str, restricted_operator: OperatorProcess
) -> None:
    ns = cluster_namespace
    kube = Kube(local_cluster, ns)
    kube.create(sample_cluster("rb", ns, mms=3, cms=1, fixed=2))
    try:
        wait_cluster_up(kube, "rb", 3, 1)
    except AssertionError:
        print(restricted_operator.log_text()[-6000:])
        raise
    p = kube.by_type("fixed")[0]
    victim, epoch = p["status"]["primary"], p["status"]["epoch"]
    kube.core.delete_namespaced_pod(victim, ns)

    def moved() -> bool:
        st = next(q for q in kube.by_type("fixed") if q["metadata"]["name"] == p["metadata"]["name"])[
            "status"
        ]
        # (a status between the loss and the promotion has no primary at all)
        return bool(st.get("primary") not in (victim, None) and st["epoch"] == epoch + 1)

    _, took = poll(moved, 10)
    assert took < 2.0
    assert "Forbidden" not in restricted_operator.log_text()
    # Verbs the operator does not need are denied.
    assert can_i(local_cluster, ns, "patch", "partitions.hybridmq.io/status")
    assert not can_i(local_cluster, ns, "delete", "statefulsets.apps")
    assert not can_i(local_cluster, ns, "create", "pods")  # it deletes one at a time in a roll, creates none
    assert can_i(local_cluster, ns, "create", "secrets")  # the cluster secret, once
    assert can_i(local_cluster, ns, "get", "secrets")  # the cluster CA, read back to sign
    for verb in ("list", "watch", "update", "delete"):
        assert not can_i(local_cluster, ns, verb, "secrets")
    assert kube.core.read_namespaced_secret("rb-cluster-secret", ns).data["secret"]
    assert not can_i(local_cluster, ns, "delete", "brokerclusters.hybridmq.io")
    # The brokers' ServiceAccount may read partitions and renew leases, nothing more.
    broker = f"system:serviceaccount:{ns}:rb-broker"

    def broker_can(verb: str, resource: str) -> bool:
        out = local_cluster.kubectl("auth", "can-i", verb, resource, "-n", ns, f"--as={broker}", check=False)
        return out.stdout.strip() == "yes"

    assert broker_can("watch", "partitions.hybridmq.io") and broker_can(
        "update", "leases.coordination.k8s.io"
    )
    assert not broker_can("patch", "partitions.hybridmq.io/status")
    assert not broker_can("patch", "partitions.hybridmq.io")
    assert not broker_can("list", "pods")
