"""Fixtures of the local Kubernetes cluster (one cluster per session, shared by tests/k8s and
tests/e2e), and of one operator (stand-in brokers) in a test's own namespace."""

from collections.abc import Iterator

import pytest
from operator_harness import Kube, OperatorProcess, apply_crds, teardown

from localcluster import LocalCluster
from localcluster.pytest_plugin import cluster_namespace, local_cluster

__all__ = ["cluster_namespace", "kube", "local_cluster", "operator"]


@pytest.fixture
def kube(local_cluster: LocalCluster, cluster_namespace: str) -> Kube:
    """Reads of the test's namespace, the CRDs applied."""
    apply_crds(local_cluster)
    return Kube(local_cluster, cluster_namespace)


@pytest.fixture
def operator(local_cluster: LocalCluster, cluster_namespace: str, kube: Kube) -> Iterator[OperatorProcess]:
    """The operator in the test's namespace; its BrokerClusters deleted and it stopped after."""
    proc = OperatorProcess(local_cluster, cluster_namespace).start()
    yield proc
    teardown(kube, proc)
