"""Fixtures of the local Kubernetes cluster (one cluster per session, shared by tests/k8s and
tests/e2e), and an operator running the real brokers."""

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "k8s"))

from operator_harness import Kube, OperatorProcess, real_brokers

from localcluster import LocalCluster
from localcluster.pytest_plugin import cluster_namespace, local_cluster

__all__ = ["cluster_namespace", "local_cluster", "real"]


@pytest.fixture
def real(
    local_cluster: LocalCluster, request: pytest.FixtureRequest
) -> Iterator[tuple[Kube, OperatorProcess]]:
    """``(kube, operator)``: a namespace of this test's own (``e2e-<module>-…``) and an operator there
    that runs the real ``hybridmq cm|mm`` (``operator_harness.real_brokers``)."""
    module = request.module.__name__.rpartition(".")[2].removeprefix("test_").replace("_", "-")
    with real_brokers(local_cluster, f"e2e-{module}"[:40]) as pair:
        yield pair
