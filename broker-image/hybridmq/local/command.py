"""``hybridmq local``: a ``LocalCluster`` in the foreground, and its process controls.

* ``hybridmq local --mms N [--cms M]``: CMs + N MMs as subprocesses with a static assignment
  (``--fixed-per-mm``, ``--on-demand-per-mm`` partitions of one replica each).
* ``hybridmq local --mms 3 --replicas 2 [--fixed N] [--on-demand-per-mm K]``: partitions planned by
  the in-process controller (operator planner), which fails them over: at once when an MM's process
  exits, after its 1 s lease when it stops heartbeating (frozen, starved); the controller URL is
  written to ``<dir>/controller.json``.
* ``--tls`` (every listener on TLS, ``<dir>/ca.crt`` for clients), ``--credentials FILE`` /
  ``--acl FILE`` (the CMs' own formats: authentication and destination grants),
  ``--max-redeliveries N`` (the MMs'): handed to ``LocalCluster``; the startup line says which are
  in force. A flag that would have no effect in the mode asked for (``--fixed`` without
  ``--replicas``, ``--fixed-per-mm`` with it, ``--signal`` without ``kill``) is refused.
* ``hybridmq local kill mm-1 [--signal KILL|STOP|CONT|TERM]``, ``hybridmq local start mm-1``
  (CMs too: ``kill cm-0``, ``start cm-0``), ``hybridmq local state``: talk to the running one (same
  ``--dir``) through the controller's HTTP API (``POST /kill/<broker>?signal=…``,
  ``POST /start/<broker>``, ``GET /state``), presenting the cluster secret of that run
  (``<dir>/cluster-secret``, readable by its owner only).
"""

from __future__ import annotations

import argparse
import json
import signal
import urllib.error
import urllib.request
from pathlib import Path

from hybridmq.broker.auth import cluster_secret
from hybridmq.local.ports import PortInUse
from hybridmq.local.runner import CONTROLLER_FILE, SECRET_FILE, LocalCluster


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


USAGE = "usage: hybridmq local kill|start <mm-N|cm-N> [--signal KILL|STOP|CONT|TERM] | state"


def control(args: argparse.Namespace) -> None:
    action, *rest = args.action
    if action not in ("kill", "start", "state") or len(rest) != (0 if action == "state" else 1):
        raise SystemExit(USAGE)
    if args.signal is not None and action != "kill":
        raise SystemExit(f"hybridmq local: --signal goes with kill, not {action}")
    directory = Path(args.dir)
    url, headers = _controller(directory)
    if action == "state":
        req = urllib.request.Request(f"{url}/state", headers=headers)
        print(json.dumps(json.loads(_call(req, directory, 10)), indent=1))
        return
    path = f"/kill/{rest[0]}?signal={args.signal or 'KILL'}" if action == "kill" else f"/start/{rest[0]}"
    req = urllib.request.Request(url + path, method="POST", headers=headers)
    print(_call(req, directory, 90).decode())


def _refuse_unused(args: argparse.Namespace) -> None:
    """A flag that would have no effect in this mode is an error, not silently dropped."""
    if args.signal is not None:
        raise SystemExit(
            "hybridmq local: --signal goes with kill (hybridmq local kill <broker> --signal ...)"
        )
    if args.replicas is None:
        for flag, value in (("--fixed", args.fixed), ("--retention-after-drain", args.retention_after_drain)):
            if value is not None:
                raise SystemExit(f"hybridmq local: {flag} needs --replicas (the local controller plans them)")
    elif args.fixed_per_mm is not None:
        raise SystemExit(
            "hybridmq local: --fixed-per-mm is for static partitions; with --replicas use --fixed"
        )
    for flag, value, least in (
        ("--mms", args.mms, 1),
        ("--cms", args.cms, 1),
        ("--replicas", args.replicas, 1),
        ("--fixed", args.fixed, 0),
        ("--fixed-per-mm", args.fixed_per_mm, 0),
        ("--on-demand-per-mm", args.on_demand_per_mm, 0),
        ("--retention-after-drain", args.retention_after_drain, 0),
        ("--max-redeliveries", args.max_redeliveries, 0),
    ):
        if value is not None and value < least:
            raise SystemExit(f"hybridmq local: {flag} must be at least {least}, not {value}")
    if args.replicas is not None and args.replicas > args.mms:
        raise SystemExit(f"hybridmq local: --replicas {args.replicas} needs at least as many MMs (--mms)")


def _auth_file(flag: str, value: str | None) -> Path | None:
    """``--credentials`` / ``--acl`` as an absolute path, read once here so that a file the CM could
    not load is a one-line error before any broker starts."""
    if value is None:
        return None
    from hybridmq.broker.auth import AclTable, CredentialStore

    path = Path(value).resolve()
    try:
        if flag == "--credentials":
            if not CredentialStore.load(path).entries():
                raise SystemExit(f"hybridmq local: {flag} {value}: names no user")
        else:
            table = AclTable.load(path)
            if not isinstance(table.rules, dict) or not all(
                isinstance(grants, dict) and all(isinstance(g, list) for g in grants.values())
                for grants in table.rules.values()
            ):
                raise ValueError('not {"<user>": {"produce"|"consume"|"admin": ["<glob>", ...]}}')
    except (OSError, ValueError) as exc:
        raise SystemExit(f"hybridmq local: {flag} {value}: {exc}") from None
    return path


def startup_line(cluster: LocalCluster, args: argparse.Namespace) -> str:
    """What ``hybridmq local`` prints once its brokers serve: addresses, and every option in force."""
    parts = [f"hybridmq local: CMs at {cluster.bootstraps} ({args.mms} MMs)"]
    if args.replicas:
        parts[0] += f", controller at {cluster.controller_url} ({args.replicas} replicas)"
    if cluster.ca_file:
        parts.append(f"TLS on every listener, CA {cluster.ca_file} (--tls-ca or HYBRIDMQ_TLS_CA)")
    if cluster.credentials:
        parts.append(f"authentication on, users from {cluster.credentials}")
    if cluster.acl:
        parts.append(f"ACLs from {cluster.acl}")
    if args.max_redeliveries is not None:
        parts.append(f"at most {args.max_redeliveries} redeliveries, then queue:_DMQ")
    return "; ".join([*parts, "Ctrl-C to stop"])


def run(args: argparse.Namespace) -> None:
    if args.action:
        control(args)
        return
    _refuse_unused(args)
    credentials = _auth_file("--credentials", args.credentials)
    acl = _auth_file("--acl", args.acl)
    try:
        cluster = LocalCluster(
            Path(args.dir),
            mms=args.mms,
            cms=args.cms,
            replicas=args.replicas,
            fixed_per_mm=2 if args.fixed_per_mm is None else args.fixed_per_mm,
            fixed=args.fixed,
            on_demand_per_mm=args.on_demand_per_mm,
            retention_after_drain=300 if args.retention_after_drain is None else args.retention_after_drain,
            cm_port=args.port,
            fsync=args.fsync,
            tls=args.tls,
            credentials=credentials,
            acl=acl,
            max_redeliveries=args.max_redeliveries,
        )
    except PortInUse as exc:
        raise SystemExit(f"hybridmq local: {exc.strerror} (choose another with --port)") from None

    def interrupt(*_: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    cluster.start()
    print(startup_line(cluster, args), flush=True)
    try:
        cluster.wait()
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()
