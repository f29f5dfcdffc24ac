"""The node agent: watches the pods bound to its node and keeps one PodWorker per pod."""

from __future__ import annotations

import ipaddress
import logging
import threading
import time

from localcluster.agent.hosts import HostsUpdater, PodView, render, write_in_place
from localcluster.agent.ipam import IPAllocator
from localcluster.agent.kube import JSON, ApiError, Kube
from localcluster.agent.node import NodeHeartbeat
from localcluster.agent.pods import AgentConfig, PodWorker

log = logging.getLogger("localcluster.agent")

ENDED_KEPT_S = 3600.0  # a watch event about a gone pod arrives within seconds; an hour is plenty


class Agent:
    """Registers the node, then runs every pod scheduled to it until `stop()`."""

    def __init__(
        self, kube: Kube, config: AgentConfig, heartbeat_interval: float, kubelet_port: int = 0
    ) -> None:
        self.kube = kube
        self.config = config
        self.ipam = IPAllocator(ipaddress.IPv4Network(config.pod_cidr))
        self.workers: dict[str, PodWorker] = {}
        # Uids whose pod was terminated or is gone, when their worker ended: a late watch event
        # about one must not start it again (it would write its status over a successor's).
        self.ended: dict[str, float] = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.heartbeat = NodeHeartbeat(
            kube,
            config.node_name,
            heartbeat_interval,
            config.directory / "agent" / "pause-heartbeats",
            kubelet_port,
        )
        self.config.node_allocatable = dict(self.heartbeat.capacity)
        self.hosts = HostsUpdater(kube, self._pod_views)
        self._watcher = threading.Thread(target=self._watch_loop, name="pod-watch", daemon=True)

    def start(self) -> None:
        while True:
            try:
                self.heartbeat.register()
                break
            except (ApiError, OSError) as exc:
                log.warning("registering node %s failed (%s); retrying", self.config.node_name, exc)
                if self.stopping.wait(1.0):
                    return
        log.info("node %s registered", self.config.node_name)
        self.heartbeat.start()
        self.hosts.start()
        self._watcher.start()

    def stop(self) -> None:
        """Stop every pod's processes (short grace) and the heartbeats; no API writes."""
        self.stopping.set()
        self.heartbeat.stopping.set()
        self.hosts.stopping.set()
        with self.lock:
            workers = list(self.workers.values())
        for worker in workers:
            worker.stop()
        for worker in workers:
            worker.join(timeout=15)

    # ------------------------------------------------------------------------------------ watch
    def _selector(self) -> dict[str, str]:
        return {"fieldSelector": f"spec.nodeName={self.config.node_name}"}

    def _watch_loop(self) -> None:
        while not self.stopping.is_set():
            try:
                listing = self.kube.get("/api/v1/pods", self._selector())
                self._resync(listing.get("items", []))
                version = listing["metadata"]["resourceVersion"]
                while not self.stopping.is_set():
                    version = self._watch(version)
            except Exception as exc:
                if self.stopping.is_set():
                    return
                log.warning("pod watch: %s; relisting", exc)
                time.sleep(1.0)

    def _watch(self, version: str) -> str:
        query = dict(self._selector())
        query["resourceVersion"] = version
        for event in self.kube.watch("/api/v1/pods", query, timeout_seconds=60):
            if self.stopping.is_set():
                break
            kind = event.get("type")
            obj: JSON = event.get("object", {})
            if kind == "ERROR":
                raise RuntimeError(f"watch error: {obj.get('message')}")
            version = obj.get("metadata", {}).get("resourceVersion", version)
            if kind in ("ADDED", "MODIFIED"):
                self._upsert(obj)
            elif kind == "DELETED":
                self._deleted(obj["metadata"]["uid"])
        return version

    def _resync(self, pods: list[JSON]) -> None:
        seen = set()
        for pod in pods:
            seen.add(pod["metadata"]["uid"])
            self._upsert(pod)
        with self.lock:
            gone = [uid for uid in self.workers if uid not in seen]
        for uid in gone:
            self._deleted(uid)

    def _upsert(self, pod: JSON) -> None:
        uid = pod["metadata"]["uid"]
        with self.lock:
            self._reap()
            worker = self.workers.get(uid)
            if worker is None:
                if self.stopping.is_set() or uid in self.ended:
                    return
                worker = PodWorker(self.kube, self.config, pod, self.ipam)
                worker.on_sandbox_ready = self._sandbox_ready
                self.workers[uid] = worker
                worker.start()
                return
        worker.update(pod)

    def _deleted(self, uid: str) -> None:
        with self.lock:
            worker = self.workers.get(uid)
        if worker is not None:
            worker.mark_deleted()

    def _pod_views(self) -> list[PodView]:
        with self.lock:
            workers = list(self.workers.values())
        return [w.view() for w in workers if w.pod_ip and w.is_alive()]

    def _sandbox_ready(self, worker: PodWorker) -> None:
        """Write the new pod's hosts file before its containers start."""
        view = worker.view()
        if not view.host_network:
            try:
                services = self.kube.get("/api/v1/services").get("items", [])
            except Exception:
                services = []
            write_in_place(view.hosts_file, render(view, self._pod_views(), services))
        self.hosts.wake.set()

    def _reap(self) -> None:
        now = time.monotonic()
        for uid in [uid for uid, w in self.workers.items() if not w.is_alive() and w.ident is not None]:
            if self.workers.pop(uid).ended:
                self.ended[uid] = now
        for uid in [uid for uid, at in self.ended.items() if now - at > ENDED_KEPT_S]:
            del self.ended[uid]
