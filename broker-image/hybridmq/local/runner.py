"""``LocalCluster``: M CMs + N MMs as real subprocesses on loopback, with a static assignment file.

Each MM leads ``fixed_per_mm`` fixed and ``on_demand_per_mm`` on-demand partitions (one replica, epoch
0). The assignment file is what the processes' ``FileAssignmentSource`` watches, so a controller (issue
4) can rewrite it. Tests use this class too: ``kill_mm`` / ``kill_cm`` (any signal, e.g. SIGKILL),
``start_mm`` / ``start_cm``, ``cms=M`` (CMs ``cm-0`` .. ``cm-<M-1>``; ``bootstraps`` lists them all),
``stop`` (terminates and reaps every process it started, nothing else).

Each run generates a fresh cluster secret, written to ``<dir>/cluster-secret`` (mode 0600) and
handed to the processes as ``HYBRIDMQ_CLUSTER_SECRET_FILE`` (not on their command line, where
``ps`` would show it); ``cluster_secret`` holds it for tests that talk to an MM directly.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from hybridmq.api.assignment import BrokerEntry, BrokerRole, PartitionAssignment, PartitionType
from hybridmq.broker.assignment_source import StaticAssignmentSource
from hybridmq.broker.auth import cluster_secret

SECRET_FILE = "cluster-secret"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalCluster:
    def __init__(
        self,
        directory: Path,
        *,
        mms: int = 1,
        cms: int = 1,
        fixed_per_mm: int = 2,
        on_demand_per_mm: int = 2,
        cm_port: int | None = None,
        fsync: str = "group",
        credentials: Path | None = None,
        acl: Path | None = None,
        mm_args: list[str] | None = None,
        cm_args: list[str] | None = None,
        log_level: str = "WARNING",
    ) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.cm_names = [f"cm-{i}" for i in range(max(1, cms))]
        self.cm_ports = {n: free_port() for n in self.cm_names}
        if cm_port:
            self.cm_ports["cm-0"] = cm_port
        self.cm_https = {n: free_port() for n in self.cm_names}
        self.cm_port = self.cm_ports["cm-0"]
        self.cm_http = self.cm_https["cm-0"]
        self.fsync = fsync
        self.credentials = credentials
        self.acl = acl
        self.mm_args = mm_args or []
        self.cm_args = cm_args or []
        self.log_level = log_level
        self.cluster_secret = cluster_secret.generate()
        self.secret_file = cluster_secret.write_file(self.dir / SECRET_FILE, self.cluster_secret)
        self.mm_names = [f"mm-{i}" for i in range(mms)]
        self.mm_ports = {n: free_port() for n in self.mm_names}
        self.mm_http = {n: free_port() for n in self.mm_names}
        brokers = [
            BrokerEntry(
                name=c,
                role=BrokerRole.CM,
                address=f"127.0.0.1:{self.cm_ports[c]}",
                http_address=f"127.0.0.1:{self.cm_https[c]}",
            )
            for c in self.cm_names
        ]
        partitions = []
        for n in self.mm_names:
            brokers.append(
                BrokerEntry(
                    name=n,
                    role=BrokerRole.MM,
                    address=f"127.0.0.1:{self.mm_ports[n]}",
                    http_address=f"127.0.0.1:{self.mm_http[n]}",
                )
            )
            idx = n.split("-")[1]
            for j in range(fixed_per_mm):
                partitions.append(
                    PartitionAssignment(
                        name=f"fixed-{idx}-{j}",
                        type=PartitionType.FIXED,
                        primary=n,
                        replicas=(n,),
                        in_sync=(n,),
                        min_in_sync=1,
                    )
                )
            for j in range(on_demand_per_mm):
                partitions.append(
                    PartitionAssignment(
                        name=f"od-{idx}-{j}",
                        type=PartitionType.ON_DEMAND,
                        primary=n,
                        replicas=(n,),
                        in_sync=(n,),
                        min_in_sync=1,
                    )
                )
        self.source = StaticAssignmentSource(partitions, brokers)
        self.assignments = self.dir / "assignments.json"
        self.assignments.write_text(self.source.to_json())
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.cm_port}"

    @property
    def bootstraps(self) -> str:
        """Every CM's address, comma-separated (a client bootstrap list)."""
        return ",".join(f"127.0.0.1:{self.cm_ports[c]}" for c in self.cm_names)

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        log = open(self.dir / f"{name}.log", "ab")  # noqa: SIM115 - handed to the child
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env.pop(cluster_secret.ENV, None)
        env[cluster_secret.FILE_ENV] = str(self.secret_file)
        proc = subprocess.Popen(
            [sys.executable, "-m", "hybridmq.cli.main", *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            preexec_fn=_die_with_parent,
        )
        log.close()
        self.procs[name] = proc
        return proc

    def start_mm(self, name: str) -> None:
        self._spawn(
            name,
            [
                "mm",
                "--name",
                name,
                "--bind",
                f"127.0.0.1:{self.mm_ports[name]}",
                "--http-bind",
                f"127.0.0.1:{self.mm_http[name]}",
                "--assignments",
                str(self.assignments),
                "--data-dir",
                str(self.dir / name),
                "--fsync",
                self.fsync,
                "--log-level",
                self.log_level,
                *self.mm_args,
            ],
        )
        wait_port(self.mm_ports[name])

    def start_cm(self, name: str = "cm-0") -> None:
        args = [
            "cm",
            "--name",
            name,
            "--bind",
            f"127.0.0.1:{self.cm_ports[name]}",
            "--http-bind",
            f"127.0.0.1:{self.cm_https[name]}",
            "--assignments",
            str(self.assignments),
            "--log-level",
            self.log_level,
            *self.cm_args,
        ]
        if self.credentials:
            args += ["--credentials", str(self.credentials)]
        if self.acl:
            args += ["--acl", str(self.acl)]
        self._spawn(name, args)
        wait_port(self.cm_ports[name])

    def start(self) -> LocalCluster:
        for n in self.mm_names:
            self.start_mm(n)
        for c in self.cm_names:
            self.start_cm(c)
        self.wait_linked()
        return self

    def wait_linked(self, timeout: float = 20.0) -> None:
        """Wait until every running CM is connected to every running MM (its ``/admin`` says so)."""
        deadline = time.monotonic() + timeout
        pending = [c for c in self.cm_names if c in self.procs and self.procs[c].poll() is None]
        while pending and time.monotonic() < deadline:
            url = f"http://127.0.0.1:{self.cm_https[pending[0]]}/admin"
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    links = json.loads(r.read())["mm_links"]
                if all(
                    links.get(n) for n, p in self.procs.items() if n in self.mm_ports and p.poll() is None
                ):
                    pending.pop(0)
                    if not pending:
                        return
                    continue
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.05)
        if pending:
            raise TimeoutError(f"{pending[0]} did not connect to every MM")

    def kill_mm(self, name: str, sig: int = signal.SIGKILL) -> None:
        proc = self.procs[name]
        proc.send_signal(sig)
        if sig in (signal.SIGKILL, signal.SIGTERM):
            proc.wait(30)

    def kill_cm(self, name: str, sig: int = signal.SIGKILL) -> None:
        self.kill_mm(name, sig)

    def pid(self, name: str) -> int:
        return self.procs[name].pid

    def wait(self) -> None:
        while all(p.poll() is None for p in self.procs.values()):
            time.sleep(0.5)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _die_with_parent() -> None:
    """In the child: get SIGTERM when the process that started us dies (no orphaned brokers)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def wait_port(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listening on port {port} after {timeout}s")
