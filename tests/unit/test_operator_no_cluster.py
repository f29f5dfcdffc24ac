"""`hybridmq-operator` without any Kubernetes cluster configured: a clear one-line error, not a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_operator_without_cluster_exits_with_clear_error(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBERNETES_", "KUBECONFIG"))}
    env["HOME"] = str(tmp_path)  # no ~/.kube/config
    operator = Path(sys.executable).with_name("hybridmq-operator")
    proc = subprocess.run(
        [str(operator), "--standalone", "--metrics-address", "127.0.0.1:0"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert "no Kubernetes cluster" in last and "KUBECONFIG" in last, last
