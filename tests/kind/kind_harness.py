"""A kind cluster made from the node image built here (hack/kind/cluster.sh), for the kind tests."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
HACK = REPO / "hack"
CLUSTER_NAME = os.environ.get("HYBRIDMQ_KIND_CLUSTER", "hybridmq-test")


def last_line_value(stdout: str, prefix: str) -> str:
    """The value after ``prefix=`` in the last line that holds it ('' when none does)."""
    for line in reversed(stdout.splitlines()):
        for word in line.split():
            if word.startswith(prefix + "="):
                return word.split("=", 1)[1]
    return ""


@dataclass(frozen=True)
class KindCluster:
    """The session's kind cluster: the environment its tools need (engine, kubeconfig, PATH)."""

    name: str
    env: dict[str, str]

    def run(
        self, *args: str, timeout: float = 300, check: bool = True, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        full_env = {**self.env, **(env or {})}
        done = subprocess.run(list(args), env=full_env, capture_output=True, text=True, timeout=timeout)
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(args)} failed ({done.returncode}): {done.stderr[-3000:]}")
        return done

    def kubectl(
        self, *args: str, timeout: float = 120, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return self.run("kubectl", "--context", f"kind-{self.name}", *args, timeout=timeout, check=check)

    def json(self, *args: str) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json").stdout)

    def node_of(self, namespace: str, pod: str) -> str:
        return str(self.json("-n", namespace, "get", "pod", pod)["spec"]["nodeName"])
