"""The kind cluster of tests/kind: created by hack/kind/cluster.sh from the node image made here, deleted
after the journey module, its only user, so that it does not idle beside the rest of the suite
(HYBRIDMQ_KIND_KEEP=1 keeps it, and reuses a kept one); the project's Docker engine is stopped again
when the fixture started it.

Without HYBRIDMQ_KIND_KEEP a cluster of that name left by an earlier run (one that was killed before
its teardown) is deleted first: its namespaces would still hold the earlier journey's brokers and
partitions, half-failed over, and the journey would audit them as its own."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest
from kind_harness import CLUSTER_NAME, HACK, KindCluster


def _tool_dir(script: str) -> str:
    done = subprocess.run([str(HACK / script)], capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def kind_cluster() -> Iterator[KindCluster]:
    engine = HACK / "docker" / "engine.sh"
    engine_was_up = subprocess.run([str(engine), "status"], capture_output=True, timeout=60).returncode == 0
    env = dict(os.environ, KIND_CLUSTER=CLUSTER_NAME)
    keep = os.environ.get("HYBRIDMQ_KIND_KEEP") == "1"
    try:
        if not keep:
            stale = subprocess.run(
                [str(HACK / "kind" / "cluster.sh"), "down"],
                capture_output=True,
                text=True,
                timeout=300,
                env=env,
            )
            assert stale.returncode == 0, stale.stderr[-3000:]
        up = subprocess.run(
            [str(HACK / "kind" / "cluster.sh"), "up"], capture_output=True, text=True, timeout=2700, env=env
        )
        assert up.returncode == 0, up.stderr[-4000:]
        env["KUBECONFIG"] = up.stdout.strip().splitlines()[-1].removeprefix("KUBECONFIG=")
        started = subprocess.run([str(engine), "start"], capture_output=True, text=True, timeout=120)
        env["DOCKER_HOST"] = started.stdout.strip().removeprefix("DOCKER_HOST=")
        kind_dir = os.path.dirname(_tool_dir("kind/build.sh"))
        env["PATH"] = os.pathsep.join([kind_dir, _tool_dir("k8sbin/build.sh"), env.get("PATH", "")])
        yield KindCluster(CLUSTER_NAME, env)
    finally:
        if not keep:
            subprocess.run(
                [str(HACK / "kind" / "cluster.sh"), "down"], capture_output=True, timeout=300, env=env
            )
            if not engine_was_up:
                subprocess.run([str(engine), "stop"], capture_output=True, timeout=120)
