"""Helpers for tests that run the HybridMQ operator against the local cluster.

* ``OperatorProcess``: ``hybridmq-operator`` as a subprocess with the admin kubeconfig (start, kill,
  restart), its log kept under the cluster directory.
* ``Kube``: the few reads the tests make (official ``kubernetes`` client).
* ``broker_command()``: what the broker pods run. The real ``hybridmq cm|mm`` when
  ``HYBRIDMQ_TEST_BROKER=real``; by default the stand-in ``tests/k8s/stub_broker.py`` (health
  endpoints, Lease renewal with a report, assignments via ``KubeAssignmentSource``), which is all
  the operator's control-plane behaviour depends on.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shlex
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from hybridmq.local.ports import PortReservations
from localcluster import LocalCluster
from localcluster.testing import wait_for

REPO = Path(__file__).resolve().parents[2]
CRDS = Path(os.environ.get("HYBRIDMQ_CRDS_DIR", REPO / "crds"))
GROUP, VERSION = "hybridmq.io", "v1alpha1"

__all__ = [
    "Kube",
    "OperatorProcess",
    "apply_crds",
    "broker_command",
    "forget_cluster_ca",
    "module_fixtures",
    "real_brokers",
    "sample_cluster",
    "trust_cluster_ca",
    "wait_for",
]


def broker_command(broker: str | None = None) -> str:
    if (broker or os.environ.get("HYBRIDMQ_TEST_BROKER")) == "real":
        return "hybridmq"
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(REPO / 'tests/k8s/stub_broker.py'))}"


def trust_cluster_ca(kube: Kube, cluster: str, directory: Path) -> ssl.SSLContext:
    """What a client of the cluster does: the CA certificate from ``<c>-cluster-ca-cert``, in
    ``HYBRIDMQ_TLS_CA`` and the client Service's name in ``HYBRIDMQ_TLS_SERVER_NAME`` (the broker
    table gives pod IPs) for every client of this process and its children; also returned as a
    context (for the brokers' HTTPS side)."""
    secret = kube.core.read_namespaced_secret(f"{cluster}-cluster-ca-cert", kube.namespace)
    ca_file = directory / f"{cluster}-ca.crt"
    ca_file.write_bytes(base64.b64decode(secret.data["ca.crt"]))
    os.environ["HYBRIDMQ_TLS_CA"] = str(ca_file)
    os.environ["HYBRIDMQ_TLS_SERVER_NAME"] = f"{cluster}.{kube.namespace}.svc"
    ctx = ssl.create_default_context(cafile=str(ca_file))
    ctx.check_hostname = False  # the HTTP side is reached by pod IP; the chain is what is checked
    return ctx


def forget_cluster_ca() -> None:
    os.environ.pop("HYBRIDMQ_TLS_CA", None)
    os.environ.pop("HYBRIDMQ_TLS_SERVER_NAME", None)


def apply_crds(cluster: LocalCluster) -> None:
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRDS))
    for crd in ("brokerclusters.hybridmq.io", "partitions.hybridmq.io", "brokerusers.hybridmq.io"):
        cluster.kubectl("wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s")


def sample_cluster(
    name: str, namespace: str, mms: int = 3, cms: int = 1, fixed: int = 3, retention_after_drain: int = 1
) -> dict[str, Any]:
    """A BrokerCluster manifest; drained on-demand partitions are kept only briefly (tests wait
    for their deletion)."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "BrokerCluster",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "connectionManagers": {"replicas": cms},
            "messageManagers": {"replicas": mms, "storage": {"size": "64Mi"}},
            "partitions": {
                # minInSync can never exceed the MM count (the CRD refuses it).
                "fixed": {"count": fixed, "replicas": 2, "minInSync": max(1, min(2, mms))},
                "onDemand": {"perMessageManager": 1, "retentionAfterDrainSeconds": retention_after_drain},
            },
        },
    }


class OperatorProcess:
    """``hybridmq-operator [--standalone] -n <namespace>`` as a subprocess."""

    def __init__(
        self,
        cluster: LocalCluster,
        namespace: str,
        extra_env: dict[str, str] | None = None,
        broker: str | None = None,
    ) -> None:
        self.cluster = cluster
        self.broker = broker
        self.namespace = namespace
        self.extra_env = extra_env or {}
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = cluster.directory / f"operator-{namespace}.log"
        self.liveness_port = 0
        self.metrics_port = 0
        # Held from the moment they are picked until the operator process is gone: no other
        # program can take them before it listens (it binds with SO_REUSEADDR, as the hold does).
        self.ports = PortReservations()
        self.standalone = True

    def start(self) -> OperatorProcess:
        env = self.cluster.env()
        env["HYBRIDMQ_BROKER_COMMAND"] = broker_command(self.broker)
        self.ports.close()  # a restart: the previous process is gone
        self.metrics_port = self.ports.reserve()
        env["HYBRIDMQ_OPERATOR_METRICS"] = f"127.0.0.1:{self.metrics_port}"
        env.update(self.extra_env)
        self.liveness_port = self.ports.reserve()
        argv = [
            str(REPO / ".venv/bin/hybridmq-operator"),
            *(["--standalone"] if self.standalone else []),
            "-n",
            self.namespace,
            "--liveness",
            f"http://127.0.0.1:{self.liveness_port}/healthz",
        ]
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        return self

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            self.proc.wait(timeout=30)
        self.proc = None
        self.ports.close()

    def stop(self) -> None:
        self.kill(signal.SIGTERM)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def http_get(self, port: int, path: str) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return str(resp.read().decode())

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


class Kube:
    """Reads through the official client (admin credentials)."""

    def __init__(self, cluster: LocalCluster, namespace: str) -> None:
        self.api = cluster.api_client()
        self.namespace = namespace
        self.core = client.CoreV1Api(self.api)
        self.apps = client.AppsV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.coord = client.CoordinationV1Api(self.api)

    def partitions(self) -> list[dict[str, Any]]:
        items = self.custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace, "partitions")[
            "items"
        ]
        return sorted(items, key=lambda p: p["metadata"]["name"])

    def by_type(self, ptype: str) -> list[dict[str, Any]]:
        return [p for p in self.partitions() if p["spec"]["type"] == ptype]

    def cluster(self, name: str) -> dict[str, Any]:
        return dict(
            self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, "brokerclusters", name)
        )

    def create(self, body: dict[str, Any]) -> None:
        plural = "brokerclusters" if body["kind"] == "BrokerCluster" else "partitions"
        self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, plural, body)

    def patch_cluster(self, name: str, patch: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, self.namespace, "brokerclusters", name, patch
        )

    def pods(self, role: str | None = None) -> list[Any]:
        selector = "app.kubernetes.io/managed-by=hybridmq-operator"
        if role:
            selector += f",hybridmq.io/role={role}"
        return list(self.core.list_namespaced_pod(self.namespace, label_selector=selector).items)

    def ready_pods(self, role: str) -> list[str]:
        out = []
        for pod in self.pods(role):
            conds = {c.type: c.status for c in (pod.status.conditions or [])}
            if conds.get("Ready") == "True" and pod.metadata.deletion_timestamp is None:
                out.append(pod.metadata.name)
        return sorted(out)

    def events(self, kind: str | None = None) -> list[Any]:
        items = self.core.list_namespaced_event(self.namespace).items
        return [e for e in items if kind is None or e.involved_object.kind == kind]

    def event_reasons(self, kind: str | None = None) -> set[str]:
        return {str(e.reason) for e in self.events(kind)}

    def sts_replicas(self, name: str) -> int:
        return int(self.apps.read_namespaced_stateful_set(name, self.namespace).spec.replicas)


def teardown(kube: Kube, operator: OperatorProcess | None, timeout: float = 60) -> None:
    """Delete the namespace's BrokerClusters while the operator still runs (it releases their
    Partitions), then stop it and strip whatever finalizer is left, so the namespace can go."""
    for hbc in kube.custom.list_namespaced_custom_object(GROUP, VERSION, kube.namespace, "brokerclusters")[
        "items"
    ]:
        kube.custom.delete_namespaced_custom_object(
            GROUP, VERSION, kube.namespace, "brokerclusters", hbc["metadata"]["name"]
        )
    if operator is not None and operator.alive():
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            left = kube.custom.list_namespaced_custom_object(GROUP, VERSION, kube.namespace, "brokerclusters")
            if not left["items"]:
                break
            time.sleep(0.5)
    if operator is not None:
        operator.stop()
    for plural in ("brokerclusters", "partitions"):
        for obj in kube.custom.list_namespaced_custom_object(GROUP, VERSION, kube.namespace, plural)["items"]:
            if obj["metadata"].get("finalizers"):
                try:
                    kube.custom.patch_namespaced_custom_object(
                        GROUP,
                        VERSION,
                        kube.namespace,
                        plural,
                        obj["metadata"]["name"],
                        {"metadata": {"finalizers": None}},
                    )
                except ApiException as exc:
                    if exc.status != 404:
                        raise


@contextlib.contextmanager
def real_brokers(cluster: LocalCluster, prefix: str) -> Iterator[tuple[Kube, OperatorProcess]]:
    """A fresh namespace ``<prefix>-<random>`` and an operator there whose pods run the real
    ``hybridmq cm|mm``: ``(kube, operator)``; afterwards its clusters are deleted, the operator
    stopped, the namespace deleted and a trusted cluster CA forgotten."""
    apply_crds(cluster)
    ns = f"{prefix}-{uuid.uuid4().hex[:5]}"
    cluster.create_namespace(ns)
    kube = Kube(cluster, ns)
    op = OperatorProcess(cluster, ns, broker="real").start()
    try:
        yield kube, op
    finally:
        forget_cluster_ca()
        teardown(kube, op)
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def wait_cluster_up(kube: Kube, name: str, mms: int, cms: int, timeout: float = 120) -> None:
    wait_for(lambda: len(kube.ready_pods("mm")) == mms or None, timeout, f"{mms} MM pods Ready")
    wait_for(lambda: len(kube.ready_pods("cm")) == cms or None, timeout, f"{cms} CM pods Ready")

    spec = kube.cluster(name)["spec"]["partitions"]
    fixed = int(spec["fixed"]["count"])
    per_mm = int((spec.get("onDemand") or {}).get("perMessageManager", 0))

    def placed() -> bool:
        # The operator creates a round's partitions in parallel: wait for every one the spec asks
        # for, not only for those that happen to exist already.
        parts = kube.partitions()
        states = [(p.get("status") or {}).get("state") for p in parts]
        if not parts or any(s != "Active" for s in states):
            return False
        if sum(p["spec"]["type"] == "fixed" for p in parts) < fixed:
            return False
        on_demand = [p["status"].get("primary") for p in parts if p["spec"]["type"] == "on-demand"]
        return all(on_demand.count(mm) >= per_mm for mm in kube.ready_pods("mm"))

    wait_for(placed, timeout, "every Partition Active")


def poll(check: Callable[[], Any], timeout: float, interval: float = 0.02) -> tuple[Any, float]:
    """(first truthy result, seconds it took), polling fast; AssertionError on timeout."""
    start = time.monotonic()
    while True:
        result = check()
        if result:
            return result, time.monotonic() - start
        if time.monotonic() - start > timeout:
            raise AssertionError(f"timed out after {timeout}s")
        time.sleep(interval)


def dump(items: Iterator[Any] | list[Any]) -> str:
    return yaml.safe_dump(list(items))


def module_fixtures(
    prefix: str, name: str, mms: int, cms: int, fixed: int, lease_s: int | None = None
) -> tuple[Any, Any, Any, Any]:
    """Module-scoped fixtures ``namespace``, ``kube``, ``operator`` and ``cluster``: one namespace,
    one operator subprocess and one BrokerCluster ``name`` (stand-in brokers) for a module's tests.
    Use: ``namespace, kube, operator, cluster = module_fixtures("operator", "hmq", 3, 1, 3)``.
    ``lease_s``: the MMs' lease, for modules whose losses are seen from the pods and that a lease
    lapsing on a loaded machine would disturb (renewed every second)."""

    @pytest.fixture(scope="module")
    def namespace(local_cluster: LocalCluster) -> Iterator[str]:
        apply_crds(local_cluster)
        ns = f"{prefix}-{uuid.uuid4().hex[:5]}"
        local_cluster.create_namespace(ns)
        yield ns
        if os.environ.get("HYBRIDMQ_TEST_KEEP_NS") != "1":
            local_cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)

    @pytest.fixture(scope="module")
    def kube(local_cluster: LocalCluster, namespace: str) -> Kube:
        return Kube(local_cluster, namespace)

    @pytest.fixture(scope="module")
    def operator(local_cluster: LocalCluster, namespace: str, kube: Kube) -> Iterator[OperatorProcess]:
        proc = OperatorProcess(local_cluster, namespace).start()
        yield proc
        teardown(kube, proc)

    @pytest.fixture(scope="module")
    def cluster(kube: Kube, operator: OperatorProcess) -> str:
        body = sample_cluster(name, kube.namespace, mms=mms, cms=cms, fixed=fixed)
        if lease_s is not None:
            body["spec"]["failureDetection"] = {
                "leaseDurationSeconds": lease_s,
                "renewIntervalMilliseconds": 1000,
            }
        kube.create(body)
        try:
            wait_cluster_up(kube, name, mms, cms)
        except AssertionError:
            print(operator.log_text()[-5000:])
            raise
        return name

    return namespace, kube, operator, cluster
