"""pytest fixtures: one local cluster per test session.

Register them in a conftest.py with `from localcluster.pytest_plugin import *  # noqa: F403`
(or import the fixture names). Both `tests/k8s` and `tests/e2e` share the *same* cluster: the
fixture caches it on the pytest config, so a session that runs both starts it once.

* `local_cluster` (session, or until `release_local_cluster(config)` after its last user): a started
  `localcluster.LocalCluster`; attributes `kubeconfig`,
  `api_url`, `bin_dir` (kubectl, helm), `node_name`, `directory`; methods `kubectl(...)`, `env()`,
  `api_client()`, `create_namespace(name)`, `pause_heartbeats()`/`resume_heartbeats()`,
  `container_pid(ns, pod, container)`, `kill_container(ns, pod, container)`, `container_log(...)`.
* `cluster_namespace` (function): a fresh namespace (its default ServiceAccount exists), deleted
  afterwards without waiting.

Environment: `LOCALCLUSTER_DIR=<dir>` attaches to a cluster already started with
`python -m localcluster up --dir <dir>` (and leaves it running); `LOCALCLUSTER_KEEP=1` keeps the
session's cluster directory (logs of every component and pod) after the session.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from localcluster.controlplane import LocalCluster, stderr_progress

_CLUSTER = pytest.StashKey[LocalCluster]()
_TEARDOWN = pytest.StashKey[Callable[[], None]]()
_PREFIX = "localcluster-pytest-"


def _sweep_orphans() -> None:
    """Stop clusters left behind by pytest sessions that were killed (their owner pid is gone)."""
    for state in Path(tempfile.gettempdir()).glob(f"{_PREFIX}*/state.json"):
        try:
            orphan = LocalCluster.attach(state.parent)
        except (OSError, ValueError, KeyError):
            continue
        if orphan.owner_pid and not psutil.pid_exists(orphan.owner_pid):
            stderr_progress(f"stopping an orphaned test cluster in {state.parent}")
            orphan.down(progress=lambda _m: None, keep_dir=False)


def _session_cluster(request: pytest.FixtureRequest) -> LocalCluster:
    config = request.config
    cluster = config.stash.get(_CLUSTER, None)
    if cluster is not None:
        return cluster
    existing = os.environ.get("LOCALCLUSTER_DIR")
    if existing:
        cluster = LocalCluster.attach(existing)
        if not cluster.running():
            raise RuntimeError(f"LOCALCLUSTER_DIR={existing}: the cluster there is not running")
    else:
        _sweep_orphans()
        directory = Path(tempfile.mkdtemp(prefix=_PREFIX))
        cluster = LocalCluster(directory)
        cluster.owner_pid = os.getpid()
        session = request.session

        def teardown() -> None:
            assert cluster is not None
            if config.stash.get(_CLUSTER, None) is not cluster:  # already stopped (release_local_cluster)
                return
            del config.stash[_CLUSTER]
            keep = os.environ.get("LOCALCLUSTER_KEEP") == "1" or session.testsfailed > 0
            cluster.down(progress=stderr_progress, keep_dir=keep)
            if keep:
                stderr_progress(f"cluster directory kept: {directory}")
            else:
                shutil.rmtree(directory, ignore_errors=True)

        config.add_cleanup(teardown)
        config.stash[_TEARDOWN] = teardown
        try:
            cluster.up(progress=stderr_progress)
        except (RuntimeError, TimeoutError) as exc:  # e.g. a component slow to start: try once more
            stderr_progress(f"cluster startup failed ({exc}); retrying once")
            cluster.up(progress=stderr_progress)
    config.stash[_CLUSTER] = cluster
    return cluster


def release_local_cluster(config: pytest.Config) -> None:
    """Stop the session's cluster now, when its last user has run, rather than at the session's end:
    an idle control plane costs CPU that the rest of a suite needs. A cluster attached through
    LOCALCLUSTER_DIR is left running."""
    teardown = config.stash.get(_TEARDOWN, None)
    if teardown is not None:
        del config.stash[_TEARDOWN]
        teardown()


@pytest.fixture(scope="session")
def local_cluster(request: pytest.FixtureRequest) -> LocalCluster:
    """The session's local Kubernetes cluster (control plane + node agent), started on first use."""
    return _session_cluster(request)


@pytest.fixture
def cluster_namespace(local_cluster: LocalCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace named after the test; deleted (without waiting) afterwards."""
    base = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower())[:40].strip("-") or "test"
    name = f"{base}-{uuid.uuid4().hex[:5]}"
    local_cluster.create_namespace(name)
    yield name
    local_cluster.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found", check=False)


__all__ = ["cluster_namespace", "local_cluster", "release_local_cluster"]
