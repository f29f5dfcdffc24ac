"""`python -m localcluster.agent`: run the node agent until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from localcluster.agent.agent import Agent
from localcluster.agent.kube import Kube
from localcluster.agent.pods import AgentConfig
from localcluster.agent.server import KubeletServer
from localcluster.processes import MARKER_ENV


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localcluster.agent", description=__doc__)
    parser.add_argument("--dir", required=True, type=Path, help="cluster directory (pods/, agent/)")
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--node-name", default="local-node")
    parser.add_argument("--api-port", type=int, required=True, help="port of the local API server")
    parser.add_argument("--pod-cidr", default="127.1.0.0/16", help="loopback range for pod IPs")
    parser.add_argument("--kubelet-port", type=int, default=0, help="port of the logs endpoint (0: none)")
    parser.add_argument("--pki", type=Path, help="directory with ca.crt, kubelet.crt, kubelet.key")
    parser.add_argument("--heartbeat-interval", type=float, default=2.0)
    parser.add_argument("--backoff-initial", type=float, default=2.0)
    parser.add_argument("--backoff-max", type=float, default=60.0)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    config = AgentConfig(
        node_name=args.node_name,
        directory=args.dir.absolute(),
        api_host="127.0.0.1",
        api_port=args.api_port,
        backoff_initial=args.backoff_initial,
        backoff_max=args.backoff_max,
        marker=os.environ.get(MARKER_ENV, ""),
        pod_cidr=args.pod_cidr,
    )
    (config.directory / "agent").mkdir(parents=True, exist_ok=True)
    server: KubeletServer | None = None
    if args.kubelet_port and args.pki:
        pki: Path = args.pki
        server = KubeletServer(
            args.kubelet_port,
            pki / "kubelet.crt",
            pki / "kubelet.key",
            pki / "ca.crt",
            config.directory / "pods",
        )
        server.start()
    agent = Agent(Kube(args.kubeconfig), config, args.heartbeat_interval, args.kubelet_port)
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stop.set()
        agent.stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    agent.start()
    while not stop.wait(1.0):
        pass
    logging.getLogger("localcluster.agent").info("stopping: terminating every pod process")
    agent.stop()
    if server is not None:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
