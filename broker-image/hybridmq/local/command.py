"""``hybridmq local``: a ``LocalCluster`` in the foreground, and its process controls.

* ``hybridmq local --mms N [--cms M]``: CMs + N MMs as subprocesses with a static assignment
  (``--fixed-per-mm``, ``--on-demand-per-mm`` partitions of one replica each).
* ``hybridmq local --mms 3 --replicas 2 [--fixed N] [--on-demand-per-mm K]``: partitions planned by
  the in-process controller (operator planner, 1 s lease), which fails them over; the controller URL
  is written to ``<dir>/controller.json``.
* ``hybridmq local kill mm-1 [--signal KILL|STOP|CONT|TERM]``, ``hybridmq local start mm-1``,
  ``hybridmq local state``: talk to the running one (same ``--dir``) through the controller's HTTP API
  (``POST /kill/<mm>?signal=…``, ``POST /start/<mm>``, ``GET /state``), presenting the cluster
  secret of that run (``<dir>/cluster-secret``, readable by its owner only).
"""

from __future__ import annotations

import argparse
import json
import signal
import urllib.request
from pathlib import Path

from hybridmq.broker.auth import cluster_secret
from hybridmq.local.runner import SECRET_FILE


def control(args: argparse.Namespace) -> None:
    action, *rest = args.action
    url = json.loads((Path(args.dir) / "controller.json").read_text())["url"]
    headers = cluster_secret.bearer(cluster_secret.load(Path(args.dir) / SECRET_FILE))
    if action == "state":
        req = urllib.request.Request(f"{url}/state", headers=headers)
        with urllib.request.urlopen(req, timeout=10) as resp:
            print(json.dumps(json.loads(resp.read()), indent=1))
        return
    if action not in ("kill", "start") or len(rest) != 1:
        raise SystemExit("usage: hybridmq local kill|start <mm> [--signal KILL|STOP|CONT|TERM] | state")
    path = f"/kill/{rest[0]}?signal={args.signal}" if action == "kill" else f"/start/{rest[0]}"
    req = urllib.request.Request(url + path, method="POST", headers=headers)
    with urllib.request.urlopen(req, timeout=30) as resp:
        print(resp.read().decode())


def run(args: argparse.Namespace) -> None:
    if args.action:
        control(args)
        return
    from hybridmq.local.ports import PortInUse
    from hybridmq.local.runner import LocalCluster

    try:
        cluster = LocalCluster(
            Path(args.dir),
            mms=args.mms,
            cms=args.cms,
            replicas=args.replicas,
            fixed_per_mm=args.fixed_per_mm,
            fixed=args.fixed,
            on_demand_per_mm=args.on_demand_per_mm,
            retention_after_drain=args.retention_after_drain,
            cm_port=args.port,
            fsync=args.fsync,
        )
    except PortInUse as exc:
        raise SystemExit(f"hybridmq local: {exc.strerror} (choose another with --port)") from None

    def interrupt(*_: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    cluster.start()
    replicated = (
        f", controller at {cluster.controller_url} ({args.replicas} replicas)" if args.replicas else ""
    )
    tls = f"; TLS, CA {cluster.ca_file} (--tls-ca or HYBRIDMQ_TLS_CA)" if cluster.ca_file else ""
    print(
        f"hybridmq local: CMs at {cluster.bootstraps} ({args.mms} MMs){replicated}{tls}; Ctrl-C to stop",
        flush=True,
    )
    try:
        cluster.wait()
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()
