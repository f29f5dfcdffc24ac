"""``hybridmq`` with the CM listening on its pod IP rather than every address, for tests that run
real CMs on the local cluster while other clusters run on the same machine: the local cluster's
pods share the host's network, so a CM of another cluster may already hold ``0.0.0.0:7400``.
Clients reach the CM through the broker table (its pod IP) either way.

Use: ``OperatorProcess(..., broker="real", extra_env={"HYBRIDMQ_BROKER_COMMAND": POD_IP_BROKER})``.
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    args = sys.argv[1:]
    pod_ip = os.environ.get("HYBRIDMQ_POD_IP")
    if args[:1] == ["cm"] and pod_ip:
        port = os.environ.get("HYBRIDMQ_BIND", "0.0.0.0:7400").rpartition(":")[2]
        os.environ["HYBRIDMQ_BIND"] = f"{pod_ip}:{port}"
    os.execv(sys.executable, [sys.executable, "-m", "hybridmq.cli.main", *args])
