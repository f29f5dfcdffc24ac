"""Fixtures of the local Kubernetes cluster (one cluster per session, shared by tests/k8s and tests/e2e)."""

from localcluster.pytest_plugin import cluster_namespace, local_cluster

__all__ = ["cluster_namespace", "local_cluster"]
