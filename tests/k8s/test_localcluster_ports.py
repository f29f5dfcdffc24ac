"""The local control plane keeps its components' ports against the other programs of the machine.

Each component (etcd, kube-apiserver, kube-controller-manager, kube-scheduler) gets a free port
picked when the cluster starts, and binds it seconds later on a loaded machine. Another program
picking a free port meanwhile used to be offered the same number: the component then failed to
bind and the cluster did not come up. Here a squatter tries to serve each port the moment the
cluster announces it, just before starting the component on it.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from localcluster import LocalCluster
from localcluster.testing import let_go, squat


def test_ports_announced_while_the_cluster_starts_are_not_served_by_another_program(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path / "cluster")
    squatters: list[subprocess.Popen[str]] = []
    took: list[int] = []
    announced: list[int] = []

    def progress(message: str) -> None:
        # "starting etcd on 127.0.0.1:P", "starting kube-apiserver on https://127.0.0.1:P",
        # "starting kube-controller-manager (:P) and kube-scheduler (:Q)"
        if message.startswith("starting"):
            ports = [int(p) for p in re.findall(r":(\d+)\b", message)]
            announced.extend(ports)
            proc, got = squat(ports)
            squatters.append(proc)
            took.extend(got)

    try:
        try:
            cluster.up(progress=progress)
        except Exception as exc:
            raise AssertionError(f"the cluster did not start; another program took {took}: {exc!r}") from exc
        assert len(announced) >= 4, announced  # etcd, apiserver, controller-manager, scheduler
        assert took == []
        cluster.create_namespace("after-squat")  # the API server answers, on its own port
    finally:
        for proc in squatters:
            let_go(proc)
        cluster.down(progress=lambda _m: None, keep_dir=False)
