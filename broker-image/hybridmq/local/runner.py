"""``LocalCluster``: M CMs + N MMs as real subprocesses on loopback: what ``hybridmq local`` runs.

Two ways to assign partitions, the brokers being the same:

* ``replicas=None``: a static assignment file. Each MM leads ``fixed_per_mm`` fixed and
  ``on_demand_per_mm`` (default 2) on-demand partitions (one replica, epoch 0); the file is what
  the processes' ``FileAssignmentSource`` watches.
* ``replicas=R``: replication and failover. The processes start with ``--controller URL``: the
  in-process ``LocalController`` (this process, its own thread) plans the partitions with the
  operator's pure planner (``fixed`` partitions, default one per MM, and ``on_demand_per_mm``,
  default 1, each with R replicas), pushes the table, takes the MMs' heartbeats (``lease_s``) and
  fails partitions over when one lapses. ``<dir>/controller.json`` names the controller URL for
  ``hybridmq local kill mm-1``; its HTTP API drives the processes too (``POST /kill/mm-1?signal=KILL``,
  CMs as well: ``POST /kill/cm-0``, ``POST /start/cm-0``: the controller's ``processes`` is this class).

Tests use this class too: ``kill_mm`` / ``kill_cm`` (any signal, e.g. SIGKILL), ``start_mm`` /
``start_cm`` (each refuses a broker whose process still runs: ``BrokerBusy``), ``processes``
(running, stopped, exited), ``cms=M`` (CMs ``cm-0`` .. ``cm-<M-1>``; ``bootstraps`` lists them all), ``stop``
(terminates and reaps every process it started, nothing else).

The ports (picked free, or ``cm_port``) are held from construction until ``stop`` (``ports.py``): no
other program on the machine can take one before a broker binds it, nor between a kill and a
restart. A port asked for by number that another program already serves is refused at once
(``PortInUse``). A broker that exits before it listens is reported with the end of its log.

Each run generates a fresh cluster secret, written to ``<dir>/cluster-secret`` (mode 0600) and
handed to the processes as ``HYBRIDMQ_CLUSTER_SECRET_FILE`` (not on their command line, where
``ps`` would show it); ``cluster_secret`` holds it for tests that talk to an MM directly.

``credentials`` / ``acl`` (files in the CM's formats: ``hybridmq local --credentials/--acl``) turn
authentication and destination ACLs on in every CM; ``max_redeliveries`` is the MMs'
``--max-redeliveries``.

``tls=True`` (``hybridmq local --tls``): a throwaway CA (``<dir>/ca.crt``, what clients verify the
CMs with: ``ca_file``, ``client_ssl()``) and one broker certificate for ``localhost``/127.0.0.1 in
``<dir>/tls/`` (``local/certs.py``); every listener is on TLS, brokers link with mutual TLS.
``tls=<directory>`` uses the caller's certificates instead (``tls.crt``, ``tls.key``, ``ca.crt``).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hybridmq.api.assignment import BrokerEntry, BrokerRole, PartitionAssignment, PartitionType
from hybridmq.api.resources import BrokerClusterSpec
from hybridmq.broker.assignment_source import StaticAssignmentSource
from hybridmq.broker.auth import cluster_secret
from hybridmq.local.controller import BrokerBusy, LocalController, cluster_spec
from hybridmq.local.ports import PortReservations

SECRET_FILE = "cluster-secret"
CONTROLLER_FILE = "controller.json"  # the controller's URL while a cluster with one runs
# How long a broker may take to listen / a CM to link every MM: Python's start-up alone takes tens of
# seconds on a loaded 2-core machine. A broker that exits is reported at once, not after the bound.
START_TIMEOUT_S = 60.0


class LocalCluster:
    def __init__(
        self,
        directory: Path,
        *,
        mms: int = 1,
        cms: int = 1,
        replicas: int | None = None,
        fixed_per_mm: int = 2,
        on_demand_per_mm: int | None = None,
        fixed: int | None = None,
        retention_after_drain: int = 300,
        lease_s: float = 1.0,
        spec: BrokerClusterSpec | None = None,
        cm_port: int | None = None,
        fsync: str = "group",
        credentials: Path | None = None,
        acl: Path | None = None,
        mm_args: list[str] | None = None,
        cm_args: list[str] | None = None,
        log_level: str = "WARNING",
        tls: bool | Path = False,
        max_redeliveries: int | None = None,
    ) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.tls_dir: Path | None = None
        self.ca_file: Path | None = None
        if isinstance(tls, Path):  # certificates of the caller's own CA
            self.tls_dir, self.ca_file = tls, tls / "ca.crt"
        elif tls:
            from hybridmq.local.certs import make_local_tls

            self.tls_dir, self.ca_file = make_local_tls(self.dir)
        if self.tls_dir is not None:
            mm_args = ["--tls-dir", str(self.tls_dir), *(mm_args or [])]
            cm_args = ["--tls-dir", str(self.tls_dir), *(cm_args or [])]
        self.ports = PortReservations()
        self.cm_names = [f"cm-{i}" for i in range(max(1, cms))]
        self.cm_ports = {n: self.ports.reserve((cm_port or 0) if n == "cm-0" else 0) for n in self.cm_names}
        self.cm_https = {n: self.ports.reserve() for n in self.cm_names}
        self.cm_port = self.cm_ports["cm-0"]
        self.cm_http = self.cm_https["cm-0"]
        self.fsync = fsync
        self.credentials = credentials
        self.acl = acl
        self.mm_args = list(mm_args or [])
        if max_redeliveries is not None:
            self.mm_args = ["--max-redeliveries", str(max_redeliveries), *self.mm_args]
        self.cm_args = list(cm_args or [])
        self.stopped: set[str] = set()  # processes sent SIGSTOP (and no SIGCONT, KILL or start since)
        self.controller: LocalController | None = None
        if replicas is not None:
            self.controller_port = self.ports.reserve()
            url = f"http://127.0.0.1:{self.controller_port}"
            self.mm_args = ["--controller", url, *self.mm_args]
            self.cm_args = ["--controller", url, *self.cm_args]
            self.spec = spec or cluster_spec(
                fixed=fixed if fixed is not None else mms,
                replicas=replicas,
                on_demand_per_mm=on_demand_per_mm if on_demand_per_mm is not None else 1,
                retention_after_drain=retention_after_drain,
            )
            fixed_per_mm = on_demand_per_mm = 0  # the controller plans them
        elif on_demand_per_mm is None:
            on_demand_per_mm = 2
        self.log_level = log_level
        self.cluster_secret = cluster_secret.generate()
        self.secret_file = cluster_secret.write_file(self.dir / SECRET_FILE, self.cluster_secret)
        self.mm_names = [f"mm-{i}" for i in range(mms)]
        self.mm_ports = {n: self.ports.reserve() for n in self.mm_names}
        self.mm_http = {n: self.ports.reserve() for n in self.mm_names}
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
        if replicas is not None:
            self.controller = LocalController(
                self.mm_names,
                brokers,
                spec=self.spec,
                lease_s=lease_s,
                port=self.controller_port,
                processes=self,
                secret=self.cluster_secret,
            )

    def client_ssl(self) -> ssl.SSLContext | None:
        """What a client passes as ``ssl=`` (None without TLS)."""
        return ssl.create_default_context(cafile=str(self.ca_file)) if self.ca_file else None

    def _admin(self, port: int, timeout: float) -> dict[str, Any]:
        scheme = "https" if self.ca_file else "http"
        with urllib.request.urlopen(
            f"{scheme}://127.0.0.1:{port}/admin", timeout=timeout, context=self.client_ssl()
        ) as r:
            return dict(json.loads(r.read()))

    @property
    def controller_url(self) -> str | None:
        return self.controller.url if self.controller is not None else None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.cm_port}"

    @property
    def bootstraps(self) -> str:
        """Every CM's address, comma-separated (a client bootstrap list)."""
        return ",".join(f"127.0.0.1:{self.cm_ports[c]}" for c in self.cm_names)

    def reserve_port(self) -> int:
        """A further port held for this cluster until ``stop`` (e.g. an MM's new address)."""
        return self.ports.reserve()

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
        if self.controller is not None:
            self.controller.process_started(name, proc.pid)  # its exit fails it over at once
        return proc

    def _not_running(self, name: str) -> None:
        proc = self.procs.get(name)
        if proc is not None and proc.poll() is None:
            state = "stopped (--signal CONT resumes it)" if name in self.stopped else "running"
            raise BrokerBusy(f"{name} is {state}: kill it first")
        self.stopped.discard(name)

    def start_mm(self, name: str, wait: bool = True) -> None:
        self._not_running(name)
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
        if wait:
            self.wait_listening(name)

    def start_cm(self, name: str = "cm-0") -> None:
        self._not_running(name)
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
        self.wait_listening(name)

    def start(self) -> LocalCluster:
        (self.dir / CONTROLLER_FILE).unlink(missing_ok=True)  # a former run's: nothing answers there
        if self.controller is None:
            for n in self.mm_names:
                self.start_mm(n)
            for c in self.cm_names:
                self.start_cm(c)
            self.wait_linked()
            return self
        self.controller.start()
        (self.dir / CONTROLLER_FILE).write_text(json.dumps({"url": self.controller.url}))
        try:
            # Spawned from this thread: the children get SIGTERM when the thread that forked them
            # ends (``PR_SET_PDEATHSIG``), so no helper threads here. The MMs start in parallel.
            for name in self.mm_names:
                self.start_mm(name, wait=False)
            for name in self.mm_names:
                self.wait_listening(name)
            for cm in self.cm_names:
                self.start_cm(cm)
            self.wait_linked()
            self.wait_in_sync()
        except BaseException:
            self.stop()
            raise
        return self

    def wait_listening(self, name: str, timeout: float = START_TIMEOUT_S) -> None:
        """Wait until the broker ``name`` accepts connections on its port; raise at once if it exited."""
        port = (self.mm_ports if name in self.mm_ports else self.cm_ports)[name]
        wait_port(port, timeout, alive=lambda: self._check_alive(name))

    def _check_alive(self, name: str) -> None:
        code = self.procs[name].poll()
        if code is not None:
            raise BrokerExited(f"{name} exited with code {code}: {self.log_tail(name)}")

    def log_tail(self, name: str, lines: int = 3) -> str:
        try:
            text = (self.dir / f"{name}.log").read_text(errors="replace")
        except OSError:
            return "(no log)"
        return " | ".join(text.strip().splitlines()[-lines:])

    def wait_linked(self, timeout: float = START_TIMEOUT_S) -> None:
        """Wait until every running CM is connected to every running MM (its ``/admin`` says so);
        a stopped (SIGSTOP) CM or MM cannot answer, so it is not waited for."""
        deadline = time.monotonic() + timeout
        pending = [
            c
            for c in self.cm_names
            if c in self.procs and self.procs[c].poll() is None and c not in self.stopped
        ]
        while pending and time.monotonic() < deadline:
            self._check_alive(pending[0])
            try:
                links = self._admin(self.cm_https[pending[0]], 2)["mm_links"]
                if all(
                    links.get(n)
                    for n, p in self.procs.items()
                    if n in self.mm_ports and p.poll() is None and n not in self.stopped
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
        if sig == signal.SIGTERM and name in self.stopped:
            proc.send_signal(signal.SIGCONT)  # a stopped process handles SIGTERM only once resumed
        if sig == signal.SIGSTOP and proc.poll() is None:
            self.stopped.add(name)
        elif sig in (signal.SIGCONT, signal.SIGKILL):
            self.stopped.discard(name)
        if sig in (signal.SIGKILL, signal.SIGTERM):
            proc.wait(30)

    def kill_cm(self, name: str, sig: int = signal.SIGKILL) -> None:
        self.kill_mm(name, sig)

    def processes(self) -> dict[str, str]:
        """Each broker process: ``running``, ``stopped`` (SIGSTOP), ``exited <code>`` or ``not started``."""
        out = {}
        for name in [*self.cm_names, *self.mm_names]:
            proc = self.procs.get(name)
            code = proc.poll() if proc is not None else None
            if proc is None:
                out[name] = "not started"
            elif code is not None:
                out[name] = f"exited {code}"
            else:
                out[name] = "stopped" if name in self.stopped else "running"
        return out

    def signal_broker(self, name: str, sig: str) -> None:
        """``hybridmq local kill <name> --signal <sig>``, for an MM or a CM."""
        if name not in self.procs:
            raise KeyError(name)
        self.kill_mm(name, getattr(signal, f"SIG{sig}"))

    def start_broker(self, name: str) -> None:
        """``hybridmq local start <name>``: an MM, or a CM (back once it is linked to every MM)."""
        if name in self.cm_ports:
            self.start_cm(name)
            self.wait_linked()
        else:
            self.start_mm(name)

    def pid(self, name: str) -> int:
        return self.procs[name].pid

    def wait(self) -> None:
        """Serve until interrupted; without a controller, until a process ends (with one, an MM
        killed on purpose does not end the cluster)."""
        while self.controller is not None or all(p.poll() is None for p in self.procs.values()):
            time.sleep(0.5)

    def stop(self) -> None:
        (self.dir / CONTROLLER_FILE).unlink(missing_ok=True)
        if self.controller is not None:
            self.controller.stop()  # first: no failover storm while the brokers go away
            for proc in self.procs.values():  # a stopped process cannot handle SIGTERM
                if proc.poll() is None:
                    proc.send_signal(signal.SIGCONT)
        for proc in self.procs.values():  # SIGINT: stop at once (SIGTERM would hand off first)
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        for proc in self.procs.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        self.ports.close()  # only now: no broker of ours binds them any more

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- views -----------------------------------------------------------------------------------
    def table(self) -> dict[str, PartitionAssignment]:
        if self.controller is None:
            return self.source.partitions()
        controller = self.controller
        table: tuple[PartitionAssignment, ...] = controller.call(lambda: controller.assignments)
        return {a.name: a for a in table}

    def partitions(self, ptype: PartitionType | None = None) -> list[PartitionAssignment]:
        return [a for a in self.table().values() if ptype is None or a.type == ptype]

    def state(self) -> dict[str, Any]:
        """The controller's view (liveness, reports, table, planner events)."""
        if self.controller is None:
            raise RuntimeError("a LocalCluster without replicas has no controller")
        return self.controller.snapshot()

    def mm_stats(self, name: str) -> dict[str, Any]:
        """The MM's own ``/admin`` stats (roles, epochs, high watermarks, delivery states)."""
        return self._admin(self.mm_http[name], 5)

    def wait_until(self, predicate: Callable[[], bool], timeout: float = 20.0, what: str = "") -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.05)
        raise TimeoutError(f"timed out waiting for {what or predicate}")

    def wait_in_sync(self, timeout: float = 30.0) -> None:
        """Every partition has a primary and all its replicas in sync, and every MM heartbeats
        (at once without a controller: one replica each, always in sync)."""
        if self.controller is None:
            return

        def ok() -> bool:
            st = self.state()
            running = {n for n, p in self.procs.items() if n in self.mm_ports and p.poll() is None}
            if not running <= set(st["live"]) or not running <= set(st["last_seen_s"]):
                return False
            return all(
                a["primary"] is not None and set(a["in_sync"]) == set(a["replicas"])
                for a in st["partitions"]
                if a["state"] != "Draining"
            )

        self.wait_until(ok, timeout, "every partition fully in sync")


def _die_with_parent() -> None:
    """In the child: get SIGTERM when the process that started us dies (no orphaned brokers)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class BrokerExited(RuntimeError):
    """A broker process of the cluster ended while the runner waited for it."""


def wait_port(port: int, timeout: float = START_TIMEOUT_S, alive: Callable[[], None] | None = None) -> None:
    """Wait until something accepts on ``port``; ``alive`` (raising when the process that should
    listen has ended) is checked before each attempt, so a broker that died is not waited for."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if alive is not None:
            alive()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listening on port {port} after {timeout}s")
