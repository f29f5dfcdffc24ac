"""Cluster names without a cluster DNS: a per-pod /etc/hosts, bind-mounted in each container.

There is no kube-dns/CoreDNS and no kube-proxy here. So that workloads can still use the usual names,
every pod (except hostNetwork ones) gets an /etc/hosts listing, with every suffix variant
(`x.ns.svc.cluster.local`, `x.ns.svc`, `x.ns`, and the bare name within the pod's namespace):

* each pod with `spec.hostname` + `spec.subdomain` (StatefulSet pods of a headless service):
  `<hostname>.<subdomain>.<ns>.svc.cluster.local` -> its pod IP (once it has one);
* each Service with a selector: `<svc>.<ns>.svc.cluster.local` -> the IP of one ready pod it
  selects (a ClusterIP cannot be routed without kube-proxy, and ports are NOT translated: a client
  must use the targetPort, which for most services equals the port).

The table is rebuilt every couple of seconds; files are rewritten in place so the bind mounts
(which pin the inode) see the new content.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from localcluster.agent.kube import JSON, Kube

log = logging.getLogger("localcluster.agent.hosts")

DOMAIN = "svc.cluster.local"
REFRESH_SECONDS = 2.0


@dataclass(frozen=True)
class PodView:
    """What the hosts table needs to know about a running pod."""

    namespace: str
    name: str
    ip: str
    labels: dict[str, str]
    hostname: str
    subdomain: str
    ready: bool
    host_network: bool
    hosts_file: Path


def _names(name: str, namespace: str, same_namespace: bool) -> list[str]:
    names = [f"{name}.{namespace}.{DOMAIN}", f"{name}.{namespace}.svc", f"{name}.{namespace}"]
    if same_namespace:
        names.append(name)
    return names


def render(pod: PodView, pods: Iterable[PodView], services: Iterable[JSON]) -> str:
    """The /etc/hosts content for `pod`."""
    pods = list(pods)
    own = pod.hostname or pod.name
    own_names = [own]
    if pod.subdomain:
        own_names = [f"{own}.{pod.subdomain}.{pod.namespace}.{DOMAIN}", *own_names]
    lines = [
        "# Kubernetes-managed hosts file (localcluster node agent).",
        "127.0.0.1\tlocalhost",
        "::1\tlocalhost ip6-localhost ip6-loopback",
        f"{pod.ip}\t{' '.join(own_names)}",
        "# pods with hostname+subdomain and services (no cluster DNS here)",
    ]
    for other in sorted(pods, key=lambda p: (p.namespace, p.name)):
        if other.subdomain and other.ip and other.hostname:
            entry = f"{other.hostname}.{other.subdomain}"
            lines.append(
                f"{other.ip}\t{' '.join(_names(entry, other.namespace, other.namespace == pod.namespace))}"
            )
    for svc in services:
        meta, spec = svc["metadata"], svc.get("spec", {})
        selector: dict[str, str] = spec.get("selector") or {}
        if not selector:
            continue
        candidates = [
            p
            for p in pods
            if p.namespace == meta["namespace"]
            and p.ip
            and all(p.labels.get(k) == v for k, v in selector.items())
        ]
        candidates.sort(key=lambda p: (not p.ready, p.name))
        if candidates:
            names = _names(meta["name"], meta["namespace"], meta["namespace"] == pod.namespace)
            lines.append(f"{candidates[0].ip}\t{' '.join(names)}")
    return "\n".join(lines) + "\n"


def write_in_place(path: Path, content: str) -> None:
    """Rewrite `path` keeping its inode (a bind mount of the file keeps pointing at it)."""
    data = content.encode()
    with open(path, "a+b") as f:
        f.seek(0)
        if f.read() == data:
            return
        f.seek(0)
        f.truncate()
        f.write(data)


class HostsUpdater(threading.Thread):
    """Periodically rewrites the hosts file of every pod from the pods and the Services."""

    def __init__(self, kube: Kube, pods: Callable[[], list[PodView]]) -> None:
        super().__init__(name="hosts-updater", daemon=True)
        self.kube = kube
        self.pods = pods
        self.stopping = threading.Event()
        self.wake = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                self.refresh()
            except Exception as exc:
                log.warning("refreshing hosts files: %s", exc)
            self.wake.wait(REFRESH_SECONDS)
            self.wake.clear()

    def refresh(self) -> None:
        pods = self.pods()
        if not pods:
            return
        services = self.kube.get("/api/v1/services").get("items", [])
        for pod in pods:
            if pod.host_network or not pod.ip or not pod.hosts_file.parent.exists():
                continue
            write_in_place(pod.hosts_file, render(pod, pods, services))
