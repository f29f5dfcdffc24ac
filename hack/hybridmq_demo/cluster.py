"""Bringing the local Kubernetes cluster (`localcluster`) up and down for the demo."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from hybridmq_demo.state import DemoState
from localcluster import LocalCluster
from localcluster.controlplane import ClusterOptions


class DemoCluster:
    """The local cluster in `directory`, with the demo's progress reporting and tool runners."""

    def __init__(self, directory: Path, state: DemoState) -> None:
        self.directory = directory.absolute()
        self.state = state
        self.cluster = LocalCluster(self.directory, options=ClusterOptions())
        self.started = False

    def _progress(self, message: str) -> None:
        self.state.set_progress(message)
        self.state.emit(f"localcluster: {message}")

    def up(self) -> None:
        """Start a fresh cluster; a cluster left running in the same directory is stopped first."""
        if (self.directory / "state.json").exists():
            previous = LocalCluster.attach(self.directory)
            if any(r.alive() for r in previous.records):
                self.state.emit(f"a cluster is still running in {self.directory}: stopping it first")
            previous.down(progress=self._progress)
        self.started = True  # from here on, down() must run even if up() fails half-way
        self.cluster.up(progress=self._progress)

    def down(self) -> None:
        if self.started:
            self.cluster.down(progress=self._progress, keep_dir=True)
            self.started = False

    def leftover_processes(self) -> list[int]:
        return [p.pid for p in self.cluster.processes()]

    @property
    def kubeconfig(self) -> Path:
        return self.cluster.kubeconfig

    @property
    def node_name(self) -> str:
        return self.cluster.node_name

    def api_client(self) -> Any:
        return self.cluster.api_client()

    def run(self, tool: str, *args: str, input: str | None = None, timeout: float = 120) -> str:
        """Run kubectl or helm (from the cluster's bin dir) against the cluster; stdout, or
        RuntimeError with the tool's stderr."""
        argv = [str(self.cluster.bin_dir / tool), f"--kubeconfig={self.kubeconfig}", *args]
        result = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout)
        if result.returncode != 0:
            detail = (result.stderr or result.stdout).strip().splitlines()
            raise RuntimeError(f"{tool} {' '.join(args[:2])} failed: {' | '.join(detail[-3:])}")
        return result.stdout

    def container_log_tail(self, namespace: str, pod: str, container: str, lines: int = 3) -> str:
        path = self.cluster.container_log(namespace, pod, container)
        if path is None or not path.exists():
            return ""
        text = path.read_text(errors="replace").strip().splitlines()
        return " | ".join(line.strip() for line in text[-lines:])
