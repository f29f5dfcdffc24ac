"""``hybridmq``: run a CM or an MM, produce and consume from the shell, or a local cluster.

Every flag has an environment variable (pods configure through env): ``HYBRIDMQ_NAME``,
``HYBRIDMQ_BIND`` (host:port of the binary protocol), ``HYBRIDMQ_LOCAL_BIND`` (a CM's second
listener, e.g. 127.0.0.1 in a pod for ``kubectl port-forward``), ``HYBRIDMQ_HTTP_BIND``,
``HYBRIDMQ_ASSIGNMENTS`` (JSON file, see ``StaticAssignmentSource``), ``HYBRIDMQ_DATA_DIR``,
``HYBRIDMQ_FSYNC``, ``HYBRIDMQ_CREDENTIALS`` (file or Secret dir), ``HYBRIDMQ_ACL``,
``HYBRIDMQ_CLUSTER_SECRET_FILE``, ``HYBRIDMQ_TLS_DIR`` (the broker's certificates: every listener on
TLS), ``HYBRIDMQ_BOOTSTRAP``, ``HYBRIDMQ_USER``, ``HYBRIDMQ_PASSWORD``, ``HYBRIDMQ_TLS_CA`` (the CA
file a client verifies the CM with: TLS on), ``HYBRIDMQ_TLS_SERVER_NAME``.
The cluster secret (required by ``cm`` and ``mm``) is read from ``--cluster-secret-file`` /
``HYBRIDMQ_CLUSTER_SECRET_FILE`` or ``HYBRIDMQ_CLUSTER_SECRET``, never from the command line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(f"HYBRIDMQ_{name}", default)


def _split(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host or "127.0.0.1", int(port)


def _common_server(p: argparse.ArgumentParser, default_port: int) -> None:
    p.add_argument("--name", default=_env("NAME", os.environ.get("HOSTNAME", "node")))
    p.add_argument("--bind", default=_env("BIND", f"127.0.0.1:{default_port}"))
    p.add_argument("--http-bind", default=_env("HTTP_BIND"))
    p.add_argument("--assignments", default=_env("ASSIGNMENTS"), help="JSON assignment file")
    p.add_argument(
        "--cluster-secret-file",
        default=_env("CLUSTER_SECRET_FILE"),
        help="file holding the cluster secret (else $HYBRIDMQ_CLUSTER_SECRET); required",
    )
    p.add_argument(
        "--tls-dir",
        default=_env("TLS_DIR"),
        help="directory with tls.crt, tls.key, ca.crt [, ca.crl]: TLS on every listener, mutual TLS "
        "between brokers (files re-read when they change)",
    )
    p.add_argument("--max-frame", type=int, default=int(_env("MAX_FRAME", str(16 << 20)) or 0))
    p.add_argument("--log-level", default=_env("LOG_LEVEL", "INFO"))
    p.add_argument(
        "--log-summary-interval",
        type=float,
        default=float(_env("LOG_SUMMARY_INTERVAL", "10") or 10),
        help="seconds: past 5 records of one message in this time, one summary with the count (0: off)",
    )
    # Assignments, liveness and failover from the local controller (``hybridmq local``).
    p.add_argument("--controller", default=_env("CONTROLLER"), help="local controller URL (broker-only)")


def _cluster_secret(args: argparse.Namespace) -> str:
    from hybridmq.broker.auth import cluster_secret

    try:
        return cluster_secret.load(args.cluster_secret_file)
    except cluster_secret.ClusterSecretError as exc:
        sys.exit(f"hybridmq {args.cmd}: {exc}")


async def _run_server(server: Any, http_bind: str | None, handoff_timeout: float = 0.0) -> None:
    from hybridmq.broker.http import start_http
    from hybridmq.broker.runtime import serve_until_signal

    runner: Any = None

    async def start() -> None:
        nonlocal runner
        await server.start()
        if http_bind:
            host, port = _split(http_bind)
            tls = server.tls.server(peer_cert=False) if server.tls is not None else None
            runner = await start_http(host, port, server.stats, lambda: server.ready, tls)

    async def stop() -> None:
        if runner is not None:
            await runner.cleanup()
        await server.stop()

    async def drain() -> None:
        await server.hand_off(handoff_timeout)

    await serve_until_signal(start, stop, drain if handoff_timeout > 0 else None)


def cmd_mm(args: argparse.Namespace) -> None:
    from hybridmq.broker.mm.server import MMConfig
    from hybridmq.broker.runtime import run, setup_logging
    from hybridmq.cli.compose import message_manager
    from hybridmq.protocol.tls import TlsConfigError

    setup_logging(args.log_level, args.log_summary_interval)
    host, port = _split(args.bind)
    config = MMConfig(
        name=args.name,
        host=host,
        port=port,
        data_dir=Path(args.data_dir),
        fsync=args.fsync,
        group_commit_ms=args.group_commit_ms,
        max_frame=args.max_frame,
        max_backlog=args.max_backlog,
        max_redeliveries=args.max_redeliveries,
        cluster_secret=_cluster_secret(args),
        segment_bytes=args.segment_bytes,
        retention_interval=args.retention_interval,
        tls_dir=args.tls_dir,
    )
    try:
        mm = message_manager(config, controller=args.controller, assignments=args.assignments)
    except TlsConfigError as exc:
        sys.exit(f"hybridmq mm: TLS: {exc}")
    run(_run_server(mm, args.http_bind, args.handoff_timeout), args.name)


def cmd_cm(args: argparse.Namespace) -> None:
    from hybridmq.broker.auth import AclTable, CredentialStore
    from hybridmq.broker.cm.server import CMConfig
    from hybridmq.broker.runtime import run, setup_logging
    from hybridmq.cli.compose import connection_manager
    from hybridmq.protocol.tls import TlsConfigError

    setup_logging(args.log_level, args.log_summary_interval)
    host, port = _split(args.bind)
    config = CMConfig(
        name=args.name,
        host=host,
        port=port,
        max_frame=args.max_frame,
        cluster_secret=_cluster_secret(args),
        auth_concurrency=args.auth_concurrency,
        auth_max_waiting=args.auth_max_waiting,
        auth_failure_delay_s=args.auth_failure_delay,
        tls_dir=args.tls_dir,
        local_bind=_split(args.local_bind) if args.local_bind else None,
    )
    config.directory_config = args.directory_config  # static application registrations
    config.credentials_path, config.acl_path = args.credentials, args.acl  # followed while running
    # BrokerUsers: the operator's <cluster>-users Secret, read through the API server.
    config.users_secret, config.namespace = _env("USERS_SECRET"), _env("NAMESPACE")
    try:
        cm = connection_manager(
            config,
            CredentialStore.load(args.credentials),
            AclTable.load(args.acl),
            controller=args.controller,
            assignments=args.assignments,
        )
    except TlsConfigError as exc:
        sys.exit(f"hybridmq cm: TLS: {exc}")
    run(_run_server(cm, args.http_bind), args.name)


async def _produce(args: argparse.Namespace) -> None:
    # With CM failover: a producer whose CM dies (its node lost, say) goes on through another CM and
    # resends what was not acknowledged, instead of failing on the closed connection.
    from hybridmq.client import Producer

    async with await Producer.connect(
        args.bootstrap,
        partition_type=args.partition_type,
        key=args.key,
        user=args.user,
        password=args.password,
        ssl=args.tls_ca,
        server_hostname=args.tls_server_name,
    ) as producer:
        if args.message is not None:
            values = [args.message.encode()] * (args.count or 1)
            for v in values:
                ack = await producer.send(args.destination, v, key=args.key)
            print(f"sent {len(values)} to {ack.partition} (last offset {ack.offset})")
            return
        n = 0
        for line in sys.stdin:
            await producer.send(args.destination, line.rstrip("\n").encode(), key=args.key)
            n += 1
        print(f"sent {n}", file=sys.stderr)


async def _consume(args: argparse.Namespace) -> None:
    from hybridmq.client import Consumer
    from hybridmq.client.consumer import StreamMessage

    async with await Consumer.connect(
        args.bootstrap,
        args.destination,
        match=args.match,
        durable=args.durable,
        user=args.user,
        password=args.password,
        ssl=args.tls_ca,
        server_hostname=args.tls_server_name,
    ) as consumer:
        n = 0
        while args.count <= 0 or n < args.count:
            try:
                msg = await consumer.receive(timeout=args.timeout)
            except TimeoutError:
                break
            if isinstance(msg, StreamMessage):
                size = 0
                async for chunk in msg.chunks():
                    size += len(chunk)
                print(json.dumps({"id": msg.id, "destination": msg.destination, "stream_bytes": size}))
            else:
                print(
                    json.dumps(
                        {
                            "id": msg.id,
                            "destination": msg.destination,
                            "value": msg.value.decode(errors="replace"),
                            **msg.attributes,
                        }
                    )
                )
            n += 1


def _cmd_produce(args: argparse.Namespace) -> None:
    # -n repeats -m: with stdin lines it would be parsed and dropped, so it is refused there.
    if args.count is not None and (args.message is None or args.count < 1):
        why = "repeats -m MESSAGE" if args.message is None else "must be at least 1"
        sys.exit(f"hybridmq produce: -n/--count {why} (without -m each line of stdin is sent once)")
    _client_command(args, _produce)


def _client_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("destination")
    p.add_argument("--bootstrap", default=_env("BOOTSTRAP", "127.0.0.1:7000"))
    p.add_argument("--user", default=_env("USER"))
    p.add_argument("--password", default=_env("PASSWORD"))
    _tls_client_args(p)


def _ca_secret_hint(bootstrap: str) -> str:
    """Where the CA is on Kubernetes: ``<cluster>-cluster-ca-cert`` (named when the first address is
    a cluster's client Service, ``<cluster>.<namespace>.svc``)."""
    host = bootstrap.split(",")[0].strip().rpartition(":")[0]
    labels = host.split(".")
    if len(labels) >= 3 and labels[2] == "svc":
        return f"Secret {labels[0]}-cluster-ca-cert of namespace {labels[1]}, key ca.crt"
    return "Secret <cluster>-cluster-ca-cert, key ca.crt"


def _client_command(args: argparse.Namespace, command: Any) -> None:
    """Run a client command; a failure to connect (TLS needed, a certificate not verified, no CM
    reachable, a refusal) is one line on stderr and exit status 1, never a traceback."""
    import ssl

    from hybridmq.client.connection import ClientError, TlsRequired, TlsVerifyFailed
    from hybridmq.client.distribution import NoBrokerAvailable
    from hybridmq.protocol import RemoteError
    from hybridmq.protocol.connection import ConnectionClosed

    where = _ca_secret_hint(str(getattr(args, "bootstrap", "") or ""))
    try:
        asyncio.run(command(args))
    except TlsRequired as exc:
        sys.exit(
            f"hybridmq {args.cmd}: the CM at {exc.address} speaks TLS: give the CA that signed its "
            f"certificate with --tls-ca FILE (or HYBRIDMQ_TLS_CA); on Kubernetes it is in {where}"
        )
    except TlsVerifyFailed as exc:
        sys.exit(
            f"hybridmq {args.cmd}: TLS: the certificate of the CM at {exc.address} was not verified "
            f"with --tls-ca {args.tls_ca} ({exc.reason}): give the cluster's CA (on Kubernetes it is "
            f"in {where}), and --tls-server-name when the address is not a name the certificate carries"
        )
    except (FileNotFoundError, ssl.SSLError) as exc:
        sys.exit(f"hybridmq {args.cmd}: TLS: {exc}")
    except (ClientError, RemoteError) as exc:
        sys.exit(f"hybridmq {args.cmd}: {exc}")
    except (ConnectionError, ConnectionClosed, NoBrokerAvailable, OSError, TimeoutError) as exc:
        sys.exit(f"hybridmq {args.cmd}: {exc or type(exc).__name__}")


def _tls_client_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tls-ca", default=_env("TLS_CA"), help="CA file to verify the CM with (TLS on)")
    p.add_argument(
        "--tls-server-name", default=_env("TLS_SERVER_NAME"), help="name the CM's certificate must carry"
    )


def main(argv: list[str] | None = None) -> None:
    args_in = sys.argv[1:] if argv is None else list(argv)
    if args_in[:1] == ["audit"]:  # its own argument parser (hybridmq.spark.audit.cli)
        sys.exit(_cmd_audit(args_in[1:]))
    parser = argparse.ArgumentParser(prog="hybridmq")
    sub = parser.add_subparsers(dest="cmd", required=True)

    mm = sub.add_parser("mm", help="run a Message Manager")
    _common_server(mm, 7100)
    mm.add_argument("--data-dir", default=_env("DATA_DIR", "data"))
    mm.add_argument("--fsync", choices=["group", "always", "never"], default=_env("FSYNC", "group"))
    mm.add_argument("--group-commit-ms", type=float, default=float(_env("GROUP_COMMIT_MS", "2") or 2))
    mm.add_argument("--max-backlog", type=int, default=int(_env("MAX_BACKLOG", "1000000") or 0))
    mm.add_argument("--segment-bytes", type=int, default=int(_env("SEGMENT_BYTES", str(64 << 20)) or 0))
    mm.add_argument("--retention-interval", type=float, default=float(_env("RETENTION_INTERVAL", "5") or 5))
    mm.add_argument("--max-redeliveries", type=int, default=int(_env("MAX_REDELIVERIES", "5") or 5))
    mm.add_argument(
        "--handoff-timeout",
        type=float,
        default=float(_env("HANDOFF_TIMEOUT", "10") or 0),
        help="seconds a SIGTERM waits for this MM's replicas to move before it exits (0: exit at once)",
    )
    mm.set_defaults(func=cmd_mm)

    cm = sub.add_parser("cm", help="run a Connection Manager")
    _common_server(cm, 7000)
    cm.add_argument("--credentials", default=_env("CREDENTIALS"), help="user:password file or Secret dir")
    cm.add_argument("--acl", default=_env("ACL"), help="ACL JSON file")
    cm.add_argument(
        "--local-bind",
        default=_env("LOCAL_BIND"),
        help="a second client listener, e.g. 127.0.0.1:7400 in a pod for kubectl port-forward "
        "(skipped with a warning when the address is taken)",
    )
    for flag, kind, default, text in (
        ("--auth-concurrency", int, "1", "password hashes verified at a time"),
        ("--auth-max-waiting", int, "64", "HELLOs queued for a verification; more get AUTH_BUSY"),
        ("--auth-failure-delay", float, "0.5", "seconds before answering a wrong password"),
    ):
        env = _env(flag[2:].upper().replace("-", "_"), default) or default
        cm.add_argument(flag, type=kind, default=kind(env), help=text)
    cm.add_argument(
        "--directory-config", default=_env("DIRECTORY_CONFIG"), help="static application registrations (JSON)"
    )
    cm.set_defaults(func=cmd_cm)

    pr = sub.add_parser("produce", help="send messages (argument or stdin lines)")
    _client_args(pr)
    pr.add_argument("-m", "--message", help="the message (without it: each line of stdin is one)")
    pr.add_argument("-n", "--count", type=int, help="send -m MESSAGE this many times (default 1)")
    pr.add_argument("--key")
    pr.add_argument("--partition-type", choices=["fixed", "on-demand"], default="on-demand")
    pr.set_defaults(func=_cmd_produce)

    co = sub.add_parser("consume", help="print messages as JSON lines")
    _client_args(co)
    co.add_argument("--match", choices=["exact", "glob", "regex"], default="exact")
    co.add_argument("--durable")
    co.add_argument("-n", "--count", type=int, default=0)
    co.add_argument("--timeout", type=float, default=None)
    co.set_defaults(func=lambda a: _client_command(a, _consume))

    lo = sub.add_parser(
        "local",
        help="CMs + N MMs on loopback (static, or replicated with --replicas)",
        description="CMs + N MMs as processes on 127.0.0.1. Without an action: run them in the "
        "foreground (Ctrl-C stops them). With one: act on the cluster running in --dir, which needs "
        "--replicas (its local controller): kill|start <broker> (mm-N or cm-N) or state.",
    )
    lo.add_argument("--mms", type=int, default=1, help="number of MMs (default 1)")
    lo.add_argument("--cms", type=int, default=1, help="number of CMs (cm-0 listens on --port; default 1)")
    lo.add_argument(
        "--fixed-per-mm",
        type=int,
        help="fixed partitions each MM leads, one replica each (without --replicas; default 2)",
    )
    lo.add_argument("--on-demand-per-mm", type=int, default=2, help="on-demand partitions per MM (default 2)")
    lo.add_argument(
        "--dir", default=".hybridmq-local", help="data, logs, cluster secret, CA (default %(default)s)"
    )
    lo.add_argument("--port", type=int, default=7000, help="cm-0's client port (default 7000; 0: a free one)")
    lo.add_argument(
        "--fsync",
        choices=["group", "always", "never"],
        default="group",
        help="the MMs' fsync (default group)",
    )
    # Replication + failover through the local controller; process controls.
    lo.add_argument("action", nargs="*", help="kill|start <mm-N|cm-N> or state, against a running cluster")
    lo.add_argument("--replicas", type=int, help="replicated partitions planned by the local controller")
    lo.add_argument("--fixed", type=int, help="fixed partitions (with --replicas; default: --mms)")
    lo.add_argument(
        "--retention-after-drain",
        type=int,
        help="seconds a drained on-demand partition is kept before deletion (with --replicas; default 300)",
    )
    lo.add_argument(
        "--tls",
        action="store_true",
        help="TLS on every listener with a throwaway CA (<dir>/ca.crt: give it to clients as --tls-ca)",
    )
    lo.add_argument(
        "--max-redeliveries",
        type=int,
        help="deliveries of a queue message after the first before it moves to queue:_DMQ "
        "(default: the MMs' own, 5 or $HYBRIDMQ_MAX_REDELIVERIES)",
    )
    lo.add_argument(
        "--credentials",
        help="authentication on: a file of user:password lines (plain, or from hybridmq hash-password) "
        "or a directory with one file per user holding the password; re-read when it changes",
    )
    lo.add_argument(
        "--acl",
        help='per-user destination grants, JSON: {"alice": {"produce": ["queue:orders.*"], "consume": '
        '["queue:*"]}, "*": {...}}; re-read when it changes',
    )
    lo.add_argument(
        "--signal",
        choices=["KILL", "STOP", "CONT", "TERM"],
        help="with kill: the signal (default KILL; STOP freezes, CONT resumes, TERM a planned stop)",
    )
    lo.set_defaults(func=_cmd_local)

    hp = sub.add_parser("hash-password", help="print a user:pbkdf2$... line for a credentials file")
    hp.add_argument("user")
    hp.add_argument("password")
    hp.set_defaults(func=_cmd_hash_password)

    ad = sub.add_parser("admin", help="run an admin command (stats, directory, sessions, mm-stats)")
    ad.add_argument("command")
    ad.add_argument("--bootstrap", default=_env("BOOTSTRAP", "127.0.0.1:7000"))
    ad.add_argument("--user", default=_env("USER"))
    ad.add_argument("--password", default=_env("PASSWORD"))
    _tls_client_args(ad)
    ad.set_defaults(func=lambda a: _client_command(a, _admin))

    sub.add_parser(
        "audit",
        help="delivery audit (PySpark) of a cluster or an exported log; see hybridmq audit --help",
        add_help=False,
    )

    args = parser.parse_args(argv)
    args.func(args)


def _cmd_audit(argv: list[str]) -> int:
    """``hybridmq audit ...`` = ``python -m hybridmq.spark.audit ...`` (needs the spark extra)."""
    try:
        from hybridmq.spark.audit import main as audit_main
    except ImportError as exc:  # pragma: no cover - pyspark/pyarrow missing
        print(f"hybridmq audit needs PySpark: {exc}", file=sys.stderr)
        return 2
    return audit_main(argv)


def _cmd_hash_password(args: argparse.Namespace) -> None:
    from hybridmq.broker.auth.credentials import hash_password

    print(f"{args.user}:{hash_password(args.password)}")


async def _admin(args: argparse.Namespace) -> None:
    from hybridmq.client import admin
    from hybridmq.client.transport import Transport

    transport = Transport.of(args.tls_ca, args.tls_server_name)
    parts = await admin(args.bootstrap, args.command, user=args.user, password=args.password, ssl=transport)
    for i, part in enumerate(parts):
        print(json.dumps({"part": i + 1, "of": len(parts), "data": part}))


def _cmd_local(args: argparse.Namespace) -> None:
    from hybridmq.local.command import run as run_local

    run_local(args)


if __name__ == "__main__":
    main()
