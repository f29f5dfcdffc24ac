"""The local control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler + node agent.

All components run as background processes in their own process groups, bound to loopback on free
ports, with their data, certificates, logs and state under one directory. `state.json` in that
directory lets another process (`python -m localcluster down`) stop everything.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from hybridmq.local.ports import PortReservations
from localcluster import health, processes
from localcluster.agent.ipam import pick_pod_cidr
from localcluster.binaries import REPO_ROOT, find_bin_dir
from localcluster.certs import CertificateAuthority, CertPair, write_service_account_keys
from localcluster.kubeconfig import write_kubeconfig
from localcluster.processes import MARKER_ENV, ProcessRecord

SERVICE_CIDR = "10.96.0.0/16"
KUBERNETES_SERVICE_IP = "10.96.0.1"
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"
STORAGE_CLASS = "standard"
PAUSE_FLAG = "agent/pause-heartbeats"

Progress = Callable[[str], None]


def stderr_progress(message: str) -> None:
    print(f"[localcluster {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@dataclass
class ClusterOptions:
    """Tunables of the local cluster (defaults suit tests: short timeouts, quick restarts)."""

    node_name: str = "local-node"
    #: kube-controller-manager --node-monitor-grace-period: how long until a silent node is NotReady.
    node_monitor_grace_period: int = 16
    #: how often the agent renews its node lease (seconds)
    heartbeat_interval: float = 2.0
    #: container restart back-off: first delay and cap (seconds), doubling in between
    backoff_initial: float = 2.0
    backoff_max: float = 60.0
    #: extra arguments per component, e.g. {"kube-apiserver": ["--v=4"]}
    extra_args: dict[str, list[str]] = field(default_factory=dict)
    startup_timeout: float = 120.0
    #: loopback range for pod IPs; None picks a free 127.x.0.0/16 (127.1.0.0/16 when free)
    pod_cidr: str | None = None


class LocalCluster:
    """Handle on a local cluster living in `directory` (started by `up()` or found by `attach()`).

    Attributes used by tests and tools: `directory`, `kubeconfig` (admin kubeconfig path),
    `api_url`, `api_port`, `bin_dir` (holds kubectl/helm), `node_name`, `ca_cert`.
    """

    def __init__(
        self, directory: Path | str, bin_dir: Path | None = None, options: ClusterOptions | None = None
    ) -> None:
        self.directory = Path(directory).absolute()
        self.options = options or ClusterOptions()
        self._bin_dir = bin_dir
        self.marker = ""
        self.api_port = 0
        self.pod_cidr = ""
        self.kubelet_port = 0
        #: pid of the process that owns the cluster (e.g. a pytest session); 0 = nobody (CLI `up`)
        self.owner_pid = 0
        self.records: list[ProcessRecord] = []

    # ----------------------------------------------------------------------------- paths & state
    @property
    def bin_dir(self) -> Path:
        if self._bin_dir is None:
            self._bin_dir = find_bin_dir()
        return self._bin_dir

    @property
    def node_name(self) -> str:
        return self.options.node_name

    @property
    def kubeconfig(self) -> Path:
        return self.directory / "kubeconfig"

    @property
    def api_url(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    @property
    def ca_cert(self) -> Path:
        return self.directory / "pki" / "ca.crt"

    @property
    def state_file(self) -> Path:
        return self.directory / "state.json"

    @property
    def pods_dir(self) -> Path:
        return self.directory / "pods"

    def _save_state(self) -> None:
        state = {
            "marker": self.marker,
            "api_port": self.api_port,
            "bin_dir": str(self._bin_dir) if self._bin_dir else None,
            "node_name": self.options.node_name,
            "pod_cidr": self.pod_cidr,
            "owner_pid": self.owner_pid,
            "processes": [r.to_dict() for r in self.records],
        }
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(self.state_file)

    @classmethod
    def attach(cls, directory: Path | str) -> LocalCluster:
        """A handle on the cluster whose state is in `directory` (started by another process)."""
        cluster = cls(directory)
        state = json.loads(cluster.state_file.read_text())
        cluster.marker = state["marker"]
        cluster.api_port = int(state["api_port"])
        cluster._bin_dir = Path(state["bin_dir"]) if state.get("bin_dir") else None
        cluster.options.node_name = state.get("node_name", cluster.options.node_name)
        cluster.pod_cidr = state.get("pod_cidr", "")
        cluster.owner_pid = int(state.get("owner_pid", 0))
        cluster.records = [ProcessRecord.from_dict(r) for r in state["processes"]]
        return cluster

    def running(self) -> bool:
        """True if every recorded process of this cluster is alive."""
        return bool(self.records) and all(r.alive() for r in self.records)

    # --------------------------------------------------------------------------------- startup
    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env[MARKER_ENV] = self.marker
        env.pop("KUBECONFIG", None)
        return env

    def _spawn(self, name: str, argv: Sequence[str], env: Mapping[str, str] | None = None) -> ProcessRecord:
        argv = [*argv, *self.options.extra_args.get(name, [])]
        _, record = processes.spawn(name, argv, self.directory / "logs" / f"{name}.log", env or self._env())
        self.records.append(record)
        self._save_state()
        return record

    def up(self, progress: Progress = stderr_progress) -> None:
        """Start everything (fresh data) and wait until the cluster is usable."""
        started = time.monotonic()
        if self.state_file.exists():
            previous = LocalCluster.attach(self.directory)
            if any(r.alive() for r in previous.records):
                raise RuntimeError(f"a local cluster is already running in {self.directory}; run down first")
        if self.directory.exists():
            shutil.rmtree(self.directory)
        self.directory.mkdir(parents=True)
        self.marker = uuid.uuid4().hex
        bins = self.bin_dir
        # Each component's ports are held from the moment they are picked until it serves them:
        # another program picking a free port meanwhile cannot take one (the components bind with
        # SO_REUSEADDR, as the hold does, so they can listen on a held port).
        ports = PortReservations()
        try:
            self._start(bins, progress, ports)
        except BaseException:
            progress("startup failed; stopping what was started (logs in %s)" % (self.directory / "logs"))
            self.down(progress=lambda _m: None, keep_dir=True)
            raise
        finally:
            ports.close()  # every component listens now (or is stopped)
        progress(f"cluster ready in {time.monotonic() - started:.1f}s; KUBECONFIG={self.kubeconfig}")

    def _start(self, bins: Path, progress: Progress, ports: PortReservations) -> None:
        pki = self.directory / "pki"
        progress("generating certificates")
        ca = CertificateAuthority(pki)
        serving = ca.issue(
            "apiserver",
            "kube-apiserver",
            dns_names=(
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ),
            ip_addresses=("127.0.0.1", KUBERNETES_SERVICE_IP),
            server=True,
            client=False,
        )
        admin = ca.issue("admin", "kubernetes-admin", organizations=("system:masters",))
        kcm_cert = ca.issue("controller-manager", "system:kube-controller-manager")
        sched_cert = ca.issue("scheduler", "system:kube-scheduler")
        sa_key, sa_pub = write_service_account_keys(pki)
        kubelet_client = ca.issue(
            "apiserver-kubelet-client", "kube-apiserver-kubelet-client", ("system:masters",)
        )
        kubelet = ca.issue(
            "kubelet",
            f"system:node:{self.node_name}",
            organizations=("system:nodes",),
            dns_names=(self.node_name, "localhost"),
            ip_addresses=("127.0.0.1",),
            server=True,
        )
        self.kubelet_port = ports.reserve()
        etcd_port, etcd_peer = ports.reserve(), ports.reserve()
        self.api_port = ports.reserve()
        kcm_port, sched_port = ports.reserve(), ports.reserve()
        server = self.api_url
        write_kubeconfig(self.kubeconfig, server, ca.pair.cert_path, admin)
        kcm_kubeconfig = write_kubeconfig(
            self.directory / "controller-manager.kubeconfig", server, ca.pair.cert_path, kcm_cert
        )
        sched_kubeconfig = write_kubeconfig(
            self.directory / "scheduler.kubeconfig", server, ca.pair.cert_path, sched_cert
        )
        # The agent acts as the node (Node authorizer + NodeRestriction), like a kubelet.
        write_kubeconfig(
            self.directory / "node.kubeconfig", self.api_url, ca.pair.cert_path, kubelet, user=self.node_name
        )

        progress(f"starting etcd on 127.0.0.1:{etcd_port}")
        etcd = self._spawn(
            "etcd",
            [
                str(bins / "etcd"),
                "--name=localcluster",
                f"--data-dir={self.directory / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{etcd_port}",
                f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
                f"--listen-peer-urls=http://127.0.0.1:{etcd_peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}",
                f"--initial-cluster=localcluster=http://127.0.0.1:{etcd_peer}",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )
        health.wait_until(
            "etcd",
            lambda: health.http_ok("127.0.0.1", etcd_port, "/health", None),
            30,
            progress,
            etcd.alive,
        )

        progress(f"starting kube-apiserver on {server}")
        apiserver = self._spawn(
            "kube-apiserver",
            [
                str(bins / "kube-apiserver"),
                f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.api_port}",
                f"--tls-cert-file={serving.cert_path}",
                f"--tls-private-key-file={serving.key_path}",
                f"--client-ca-file={ca.pair.cert_path}",
                f"--service-account-key-file={sa_pub}",
                f"--service-account-signing-key-file={sa_key}",
                f"--service-account-issuer={SA_ISSUER}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                f"--kubelet-client-certificate={kubelet_client.cert_path}",
                f"--kubelet-client-key={kubelet_client.key_path}",
                f"--kubelet-certificate-authority={ca.pair.cert_path}",
                "--kubelet-preferred-address-types=InternalIP",
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction",
                "--allow-privileged=true",
                "--profiling=false",
                "--v=1",
            ],
        )
        admin_ctx = health.tls_context(ca.pair.cert_path, admin)
        health.wait_until(
            "kube-apiserver /readyz",
            lambda: health.http_ok("127.0.0.1", self.api_port, "/readyz", admin_ctx),
            self.options.startup_timeout,
            progress,
            apiserver.alive,
        )
        # RBAC is bootstrapped once /readyz passes: the controller-manager and scheduler can start.
        progress(f"starting kube-controller-manager (:{kcm_port}) and kube-scheduler (:{sched_port})")
        kcm = self._spawn(
            "kube-controller-manager",
            [
                str(bins / "kube-controller-manager"),
                f"--kubeconfig={kcm_kubeconfig}",
                f"--authentication-kubeconfig={kcm_kubeconfig}",
                f"--authorization-kubeconfig={kcm_kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={kcm_port}",
                "--controllers=*",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={sa_key}",
                f"--root-ca-file={ca.pair.cert_path}",
                f"--cluster-signing-cert-file={ca.pair.cert_path}",
                f"--cluster-signing-key-file={ca.pair.key_path}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--enable-hostpath-provisioner=true",
                "--leader-elect=false",
                f"--node-monitor-grace-period={self.options.node_monitor_grace_period}s",
                "--node-monitor-period=2s",
                "--profiling=false",
                "--v=1",
            ],
        )
        sched = self._spawn(
            "kube-scheduler",
            [
                str(bins / "kube-scheduler"),
                f"--kubeconfig={sched_kubeconfig}",
                f"--authentication-kubeconfig={sched_kubeconfig}",
                f"--authorization-kubeconfig={sched_kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={sched_port}",
                "--leader-elect=false",
                "--profiling=false",
                "--v=1",
            ],
        )
        self._bootstrap(progress)
        self._start_agent(progress)
        insecure = health.tls_context()
        health.wait_until(
            "kube-controller-manager /healthz",
            lambda: health.http_ok("127.0.0.1", kcm_port, "/healthz", insecure),
            self.options.startup_timeout,
            progress,
            kcm.alive,
        )
        health.wait_until(
            "kube-scheduler /healthz",
            lambda: health.http_ok("127.0.0.1", sched_port, "/healthz", insecure),
            self.options.startup_timeout,
            progress,
            sched.alive,
        )
        health.wait_until(
            f"node {self.node_name} Ready",
            self._node_ready,
            self.options.startup_timeout,
            progress,
        )
        health.wait_until(
            "service account default/default and kube-root-ca.crt",
            lambda: (
                self._exists("/api/v1/namespaces/default/serviceaccounts/default")
                and self._exists("/api/v1/namespaces/default/configmaps/kube-root-ca.crt")
            ),
            self.options.startup_timeout,
            progress,
        )

    def _admin_ctx(self) -> Any:
        pki = self.directory / "pki"
        return health.tls_context(self.ca_cert, CertPair(pki / "admin.crt", pki / "admin.key"))

    def _exists(self, path: str) -> bool:
        status, _ = health.get("127.0.0.1", self.api_port, path, self._admin_ctx())
        return status == 200

    def _node_ready(self) -> bool:
        status, body = health.get(
            "127.0.0.1", self.api_port, f"/api/v1/nodes/{self.node_name}", self._admin_ctx()
        )
        if status != 200:
            return False
        node = json.loads(body)
        conditions = node.get("status", {}).get("conditions", [])
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    def _bootstrap(self, progress: Progress) -> None:
        """Cluster objects that a kubelet-based installer would create: the default StorageClass."""
        storage_class = {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {
                "name": STORAGE_CLASS,
                "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
            },
            "provisioner": "kubernetes.io/host-path",
            "reclaimPolicy": "Delete",
            "volumeBindingMode": "Immediate",
        }
        progress(f"creating default StorageClass {STORAGE_CLASS} (kubernetes.io/host-path)")
        self.kubectl("apply", "-f", "-", input=json.dumps(storage_class))

    def _start_agent(self, progress: Progress) -> None:
        progress(f"starting the node agent ({self.node_name})")
        env = self._env()
        hack = str(REPO_ROOT / "hack")
        env["PYTHONPATH"] = hack + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        opts = self.options
        self.pod_cidr = opts.pod_cidr or pick_pod_cidr()
        progress(f"pod IPs from {self.pod_cidr}")
        self._spawn(
            "node-agent",
            [
                sys.executable,
                "-m",
                "localcluster.agent",
                f"--dir={self.directory}",
                f"--kubeconfig={self.directory / 'node.kubeconfig'}",
                f"--node-name={opts.node_name}",
                f"--api-port={self.api_port}",
                f"--pod-cidr={self.pod_cidr}",
                f"--kubelet-port={self.kubelet_port}",
                f"--pki={self.directory / 'pki'}",
                f"--heartbeat-interval={opts.heartbeat_interval}",
                f"--backoff-initial={opts.backoff_initial}",
                f"--backoff-max={opts.backoff_max}",
            ],
            env,
        )

    # --------------------------------------------------------------------------------- shutdown
    def down(self, progress: Progress = stderr_progress, keep_dir: bool = True) -> None:
        """Stop the agent (and with it every pod), then the control plane; sweep any straggler."""
        volumes = self._provisioned_volume_dirs()
        by_name = {r.name: r for r in self.records}
        order = ["node-agent", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"]
        for name in order:
            record = by_name.pop(name, None)
            if record is not None and record.alive():
                progress(f"stopping {name} (pid {record.pid})")
                proc = record.process()
                if proc is not None:  # a frozen agent could not stop its pods
                    with contextlib.suppress(psutil.Error):
                        proc.resume()
                processes.stop_group(record, grace=15.0 if name == "node-agent" else 5.0)
        for record in by_name.values():
            processes.stop_group(record, grace=5.0)
        if self.marker:
            leftovers = processes.processes_with_marker(self.marker)
            if leftovers:
                progress(f"killing {len(leftovers)} leftover process(es): {[p.pid for p in leftovers]}")
                processes.kill_all(leftovers)
        for path in volumes:
            shutil.rmtree(path, ignore_errors=True)
        if self.state_file.exists():
            self.state_file.unlink()
        if not keep_dir:
            shutil.rmtree(self.directory, ignore_errors=True)
        progress("stopped")

    def _provisioned_volume_dirs(self) -> list[Path]:
        """Directories the host-path provisioner made for this cluster's PVs (under /tmp/hostpath_pv)."""
        if not any(r.name == "kube-apiserver" and r.alive() for r in self.records):
            return []
        try:
            result = self.kubectl("get", "pv", "-o", "json", check=False, timeout=10)
            items = json.loads(result.stdout).get("items", []) if result.returncode == 0 else []
        except (subprocess.SubprocessError, ValueError, OSError):
            return []
        paths = [Path(pv["spec"].get("hostPath", {}).get("path", "")) for pv in items]
        return [p for p in paths if p.parent == Path("/tmp/hostpath_pv")]

    # ----------------------------------------------------------------------------- conveniences
    def env(self) -> dict[str, str]:
        """Environment for subprocesses that should talk to this cluster (KUBECONFIG, PATH)."""
        env = dict(os.environ)
        env["KUBECONFIG"] = str(self.kubeconfig)
        env["PATH"] = f"{self.bin_dir}{os.pathsep}{env.get('PATH', '')}"
        return env

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this cluster; returns the completed process (text output)."""
        result = subprocess.run(
            [str(self.bin_dir / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and result.returncode != 0:
            raise subprocess.CalledProcessError(
                result.returncode, result.args, output=result.stdout, stderr=result.stderr
            )
        return result

    def helm(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        """Run helm (from `bin_dir`) against this cluster; returns the completed process (text output)."""
        result = subprocess.run(
            [str(self.bin_dir / "helm"), f"--kubeconfig={self.kubeconfig}", *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.env(),
        )
        if check and result.returncode != 0:
            raise subprocess.CalledProcessError(
                result.returncode, result.args, output=result.stdout, stderr=result.stderr
            )
        return result

    def create_namespace(self, name: str, timeout: float = 60) -> None:
        """Create a namespace and wait until its default ServiceAccount exists (pods need it)."""
        self.kubectl("create", "namespace", name)
        health.wait_until(
            f"serviceaccount {name}/default",
            lambda: self._exists(f"/api/v1/namespaces/{name}/serviceaccounts/default"),
            timeout,
            lambda _m: None,
        )

    def api_client(self) -> Any:
        """A new `kubernetes.client.ApiClient` for this cluster (admin credentials)."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))

    # ----------------------------------------------------------------------------- fault injection
    def pause_heartbeats(self) -> None:
        """Make the node agent stop renewing its lease and node status (simulates node loss)."""
        flag = self.directory / PAUSE_FLAG
        flag.parent.mkdir(parents=True, exist_ok=True)
        flag.touch()

    def resume_heartbeats(self) -> None:
        (self.directory / PAUSE_FLAG).unlink(missing_ok=True)

    def freeze_node(self) -> None:
        """Stop the node agent dead (SIGSTOP), like a node that stopped answering: no heartbeats,
        no status, no pod started or killed; the containers it already runs keep running."""
        self._agent_process().suspend()

    def thaw_node(self) -> None:
        """Let a frozen node agent go on (SIGCONT); it catches up with what changed meanwhile."""
        self._agent_process().resume()

    def _agent_process(self) -> psutil.Process:
        for record in self.records:
            if record.name == "node-agent" and (proc := record.process()) is not None:
                return proc
        raise LookupError("the node agent is not running")

    def container_pid(self, namespace: str, pod: str, container: str | None = None) -> int | None:
        """PID of the running process of a container (the first container if none named)."""
        for pod_dir in sorted(self.pods_dir.glob(f"{namespace}_{pod}_*")):
            pidfiles = sorted((pod_dir / "containers").glob(f"{container or '*'}.pid"))
            for pidfile in pidfiles:
                try:
                    pid_text, create_time = pidfile.read_text().split()
                except (OSError, ValueError):
                    continue
                if ProcessRecord("container", int(pid_text), float(create_time)).alive():
                    return int(pid_text)
        return None

    def kill_container(
        self, namespace: str, pod: str, container: str | None = None, sig: int = signal.SIGKILL
    ) -> int:
        """Crash a container: send `sig` (default SIGKILL) to its process group. Returns the pid."""
        pid = self.container_pid(namespace, pod, container)
        if pid is None:
            raise LookupError(f"no running process for {namespace}/{pod} container {container or '*'}")
        processes.signal_group(pid, sig)
        return pid

    def container_log(self, namespace: str, pod: str, container: str) -> Path | None:
        """The log file (stdout+stderr) of the most recent pod of that name's container."""
        candidates = sorted(
            self.pods_dir.glob(f"{namespace}_{pod}_*/logs/{container}.log"), key=lambda p: p.stat().st_mtime
        )
        return candidates[-1] if candidates else None

    def processes(self) -> list[psutil.Process]:
        """Every live process that belongs to this cluster (control plane, agent, containers)."""
        return processes.processes_with_marker(self.marker) if self.marker else []
