"""Command line: `python -m localcluster up|down|status [--dir DIR]`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from localcluster.controlplane import ClusterOptions, LocalCluster, stderr_progress


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localcluster", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start the cluster in the background and wait until it is ready")
    up.add_argument("--node-monitor-grace-period", type=int, default=ClusterOptions.node_monitor_grace_period)
    for p in (
        up,
        sub.add_parser("down", help="stop the cluster"),
        sub.add_parser("status", help="show state"),
    ):
        p.add_argument("--dir", type=Path, default=Path(".localcluster"), help="cluster directory")
    args = parser.parse_args(argv)
    directory: Path = args.dir
    state = directory / "state.json"

    if args.command == "up":
        if state.exists():
            existing = LocalCluster.attach(directory)
            if existing.running():
                stderr_progress(f"already running; KUBECONFIG={existing.kubeconfig}")
                print(existing.kubeconfig)
                return 0
            existing.down()
        options = ClusterOptions(node_monitor_grace_period=args.node_monitor_grace_period)
        cluster = LocalCluster(directory, options=options)
        cluster.up()
        print(cluster.kubeconfig)
        return 0
    if args.command == "down":
        if not state.exists():
            stderr_progress(f"no cluster state in {directory}; nothing to stop")
            return 0
        LocalCluster.attach(directory).down()
        return 0
    if not state.exists():
        print("stopped")
        return 1
    cluster = LocalCluster.attach(directory)
    for record in cluster.records:
        print(f"{record.name:26} pid {record.pid:<8} {'running' if record.alive() else 'DEAD'}")
    print(f"api server: {cluster.api_url}\nkubeconfig: {cluster.kubeconfig}")
    return 0 if cluster.running() else 1


if __name__ == "__main__":
    sys.exit(main())
