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
import urllib.error
import urllib.request
from pathlib import Path

from hybridmq.broker.auth import cluster_secret
from hybridmq.local.runner import CONTROLLER_FILE, SECRET_FILE


def _controller(directory: Path) -> tuple[str, dict[str, str]]:
    """The running controller's URL and the headers that authenticate to it; a one-line
    ``SystemExit`` when ``directory`` holds no cluster that has one."""
    try:
        url = str(json.loads((directory / CONTROLLER_FILE).read_text())["url"])
    except FileNotFoundError:
        if (directory / SECRET_FILE).exists():
            raise SystemExit(
                f"hybridmq local: the cluster in {directory} runs without a controller: kill, start and "
                "state need one started with --replicas"
            ) from None
        raise SystemExit(f"hybridmq local: no cluster runs in {directory} (see --dir)") from None
    except (OSError, ValueError, KeyError) as exc:
        raise SystemExit(f"hybridmq local: cannot read {directory / CONTROLLER_FILE}: {exc}") from None
    try:
        return url, cluster_secret.bearer(cluster_secret.load(directory / SECRET_FILE))
    except cluster_secret.ClusterSecretError as exc:
        raise SystemExit(f"hybridmq local: {exc}") from None


def _call(req: urllib.request.Request, directory: Path, timeout: float) -> bytes:
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return bytes(resp.read())
    except urllib.error.HTTPError as exc:  # e.g. an unknown MM: the controller says which
        raise SystemExit(f"hybridmq local: {exc.read().decode(errors='replace').strip()}") from None
    except OSError as exc:
        raise SystemExit(f"hybridmq local: the cluster in {directory} does not answer ({exc})") from None


def control(args: argparse.Namespace) -> None:
    action, *rest = args.action
    if action not in ("kill", "start", "state") or len(rest) != (0 if action == "state" else 1):
        raise SystemExit("usage: hybridmq local kill|start <mm> [--signal KILL|STOP|CONT|TERM] | state")
    directory = Path(args.dir)
    url, headers = _controller(directory)
    if action == "state":
        req = urllib.request.Request(f"{url}/state", headers=headers)
        print(json.dumps(json.loads(_call(req, directory, 10)), indent=1))
        return
    path = f"/kill/{rest[0]}?signal={args.signal}" if action == "kill" else f"/start/{rest[0]}"
    req = urllib.request.Request(url + path, method="POST", headers=headers)
    print(_call(req, directory, 30).decode())


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
