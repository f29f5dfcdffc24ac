"""One worker thread per pod: sandbox (IP, volumes), containers, probes, restarts, status, deletion."""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from localcluster.agent import images
from localcluster.agent.container import Container, StartError, Termination, now_rfc3339
from localcluster.agent.env import ConfigError, PodContext, container_env, service_env
from localcluster.agent.events import EventRecorder
from localcluster.agent.hosts import PodView
from localcluster.agent.ipam import IPAllocator
from localcluster.agent.kube import JSON, ApiError, Kube, pod_path
from localcluster.agent.probes import Prober, run_probe
from localcluster.agent.status import Conditions, phase
from localcluster.agent.volumes import Mount, VolumeManager, VolumeNotReady
from localcluster.processes import MARKER_ENV

log = logging.getLogger("localcluster.agent.pods")

SYNC_INTERVAL = 0.5
VOLUME_REFRESH_SECONDS = 60.0
SHUTDOWN_GRACE = 3.0
TERMINAL = ("Succeeded", "Failed")


@dataclass
class AgentConfig:
    node_name: str
    directory: Path
    api_host: str
    api_port: int
    backoff_initial: float
    backoff_max: float
    marker: str = ""
    pod_cidr: str = "127.1.0.0/16"
    node_allocatable: dict[str, str] = field(default_factory=dict)


class PodWorker(threading.Thread):
    """Runs one pod until it is deleted (or the agent stops)."""

    def __init__(self, kube: Kube, config: AgentConfig, pod: JSON, ipam: IPAllocator) -> None:
        meta = pod["metadata"]
        super().__init__(name=f"pod-{meta['namespace']}/{meta['name']}", daemon=True)
        self.kube = kube
        self.config = config
        self.pod = pod
        self.ipam = ipam
        self.namespace: str = meta["namespace"]
        self.pod_name: str = meta["name"]
        self.uid: str = meta["uid"]
        self.pod_dir = config.directory / "pods" / f"{self.namespace}_{self.pod_name}_{self.uid}"
        spec = pod["spec"]
        self.init_containers = [
            Container(c, self.pod_dir, self.uid, True) for c in spec.get("initContainers", [])
        ]
        self.containers = [Container(c, self.pod_dir, self.uid) for c in spec.get("containers", [])]
        self.conditions = Conditions()
        self.volumes = VolumeManager(kube, self.pod_dir)
        self.host_ip = "127.0.0.1"
        self.pod_ip = ""
        self.start_time = ""
        self.sandbox_ready = False
        self.sandbox_message = ""
        self.init_failed = False
        self.finished = pod.get("status", {}).get("phase") in TERMINAL  # nothing left to run
        self.deleted = threading.Event()
        self.ended = False  # its pod is gone or was terminated: this uid never runs again
        self.shutdown = threading.Event()
        self.wake = threading.Event()
        self._last_status: JSON | None = None
        self._last_refresh = 0.0
        self._next_sandbox_try = 0.0
        self.on_sandbox_ready: Callable[[PodWorker], None] | None = None
        self.events = EventRecorder(kube, config.node_name, pod)

    # ------------------------------------------------------------------------------ from the agent
    def update(self, pod: JSON) -> None:
        self.pod = pod
        self.wake.set()

    def mark_deleted(self) -> None:
        self.deleted.set()
        self.wake.set()

    def stop(self) -> None:
        self.shutdown.set()
        self.wake.set()

    @property
    def restart_policy(self) -> str:
        return str(self.pod["spec"].get("restartPolicy", "Always"))

    @property
    def hosts_file(self) -> Path:
        return self.pod_dir / "etc-hosts"

    def view(self) -> PodView:
        """What the hosts table needs from this pod."""
        meta, spec = self.pod["metadata"], self.pod["spec"]
        return PodView(
            namespace=self.namespace,
            name=self.pod_name,
            ip=self.pod_ip,
            labels=dict(meta.get("labels", {})),
            hostname=spec.get("hostname", ""),
            subdomain=spec.get("subdomain", ""),
            ready=bool(self.containers) and all(c.ready for c in self.containers),
            host_network=bool(spec.get("hostNetwork")),
            hosts_file=self.hosts_file,
        )

    def context(self) -> PodContext:
        return PodContext(self.pod, self.pod_ip, self.host_ip, self.config.node_allocatable)

    # ------------------------------------------------------------------------------------- loop
    def run(self) -> None:
        try:
            self._run()
        except Exception:
            log.exception("pod worker %s/%s failed", self.namespace, self.pod_name)
            self._stop_all(SHUTDOWN_GRACE)
        finally:
            self._cleanup()

    def _run(self) -> None:
        if self.pod["spec"].get("hostNetwork"):
            self.pod_ip = self.host_ip
        else:
            self.pod_ip = self.ipam.allocate()
        self.start_time = self.pod.get("status", {}).get("startTime") or now_rfc3339()
        log.info("pod %s/%s: ip %s", self.namespace, self.pod_name, self.pod_ip)
        while True:
            if self.shutdown.is_set():
                self._stop_all(SHUTDOWN_GRACE)
                return
            if self.deleted.is_set():
                self._stop_all(min(self._grace(), 2.0))
                self.ended = True
                return
            if self.pod["metadata"].get("deletionTimestamp"):
                self._terminate_for_deletion()
                self.ended = True
                return
            if not self.finished:
                self._sync()
                self._push_status()
            self.wake.wait(SYNC_INTERVAL)
            self.wake.clear()

    def _grace(self) -> float:
        meta_grace = self.pod["metadata"].get("deletionGracePeriodSeconds")
        if meta_grace is not None:
            return float(meta_grace)
        return float(self.pod["spec"].get("terminationGracePeriodSeconds", 30))

    # ------------------------------------------------------------------------------------- sync
    def _sync(self) -> None:
        now = time.monotonic()
        if not self.sandbox_ready:
            if now < self._next_sandbox_try:
                return
            try:
                self.volumes.setup(self.context())
            except (VolumeNotReady, ConfigError, ApiError, OSError) as exc:
                self.sandbox_message = str(exc)
                self._next_sandbox_try = now + 2.0
                self.events.record("FailedMount", f"MountVolume.SetUp failed: {exc}", warning=True)
                return
            self.sandbox_ready = True
            self.sandbox_message = ""
            if self.on_sandbox_ready is not None:
                try:
                    self.on_sandbox_ready(self)
                except Exception:
                    log.exception("pod %s/%s: sandbox hook failed", self.namespace, self.pod_name)
            self._last_refresh = now
        elif now - self._last_refresh > VOLUME_REFRESH_SECONDS:
            self._last_refresh = now
            try:
                self.volumes.refresh(self.context())
            except (ConfigError, ApiError, OSError) as exc:
                log.warning("pod %s/%s: refreshing volumes: %s", self.namespace, self.pod_name, exc)
        for container in self.init_containers:
            if self._succeeded(container):
                continue
            self._drive(container)
            if not self._succeeded(container):
                return
        for container in self.containers:
            self._drive(container)
        if self.init_failed or self._phase() in TERMINAL:
            self.finished = True
            self._push_status()

    @staticmethod
    def _succeeded(container: Container) -> bool:
        return container.termination is not None and container.termination.exit_code == 0

    def _drive(self, c: Container) -> None:
        """Advance one container: reap an exit, run probes, or (re)start when allowed."""
        now = time.monotonic()
        if c.running:
            termination = c.poll()
            if termination is not None:
                self._on_exit(c, termination)
            else:
                self._probe(c)
            return
        if c.termination is not None or self.init_failed:
            return  # terminated for good
        if c.backoff_until > now:
            return
        mapping = images.resolve(c.image)
        if mapping is None:
            c.waiting_reason = "ErrImagePull"
            c.waiting_message = (
                f'image "{c.image}" has no local mapping: the localcluster node agent runs only the images '
                "listed in localcluster.agent.images.IMAGE_TABLE (repositories ending in "
                + ", ".join(sorted(images.IMAGE_TABLE))
                + ")"
            )
            self.events.record(
                "Failed", f'Failed to pull image "{c.image}": {c.waiting_message}', True, c.name
            )
            return
        try:
            env = self._env(c, mapping)
            mounts = self.volumes.mounts_for(c.spec, env)
            if not self.pod["spec"].get("hostNetwork"):
                if not self.hosts_file.exists():
                    self.hosts_file.write_text(f"127.0.0.1\tlocalhost\n{self.pod_ip}\t{self.pod_name}\n")
                mounts.append(Mount(self.hosts_file, "/etc/hosts", read_only=False))
        except (ConfigError, ApiError, OSError) as exc:
            c.waiting_reason = "CreateContainerConfigError"
            c.waiting_message = str(exc)
            self.events.record("Failed", f"Error: {exc}", True, c.name)
            c.backoff_until = now + 2.0
            return
        if c.runs > 0:
            c.restart_count += 1
        try:
            c.start(env, mounts, mapping)
            self.events.record("Started", f"Started container {c.name}", False, c.name, once=False)
            log.info(
                "pod %s/%s: started %s (pid %s)", self.namespace, self.pod_name, c.name, c.proc and c.proc.pid
            )
        except (StartError, OSError) as exc:
            self._on_exit(c, c.start_failed(str(exc)))
        except Exception as exc:
            log.exception("pod %s/%s: starting %s failed", self.namespace, self.pod_name, c.name)
            self._on_exit(c, c.start_failed(f"{type(exc).__name__}: {exc}"))

    def _env(self, c: Container, mapping: images.ImageMapping) -> dict[str, str]:
        base = {
            "PATH": ":".join([*mapping.path, "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]),
            "HOME": "/root",
            "LANG": "C.UTF-8",
            MARKER_ENV: self.config.marker,
        }
        base.update(mapping.env)
        base.update(service_env(self.config.api_host, self.config.api_port))
        return container_env(self.kube, self.context(), c.spec, base)

    def _on_exit(self, c: Container, termination: Termination) -> None:
        ran_for = time.monotonic() - c.started_mono if c.started_mono else 0.0
        policy = self.restart_policy
        if c.init:
            restart = termination.exit_code != 0 and policy != "Never"
        else:
            restart = policy == "Always" or (policy == "OnFailure" and termination.exit_code != 0)
        log.info(
            "pod %s/%s: container %s exited with %s (%s)%s",
            self.namespace,
            self.pod_name,
            c.name,
            termination.exit_code,
            termination.reason,
            ", restarting" if restart else "",
        )
        if restart:
            c.last_termination = termination
            c.termination = None
            c.schedule_restart(self.config.backoff_initial, self.config.backoff_max, ran_for)
            self.events.record(
                "BackOff",
                f"Back-off restarting failed container {c.name} in pod {self.pod_name}",
                True,
                c.name,
            )
            c.waiting_reason = "CrashLoopBackOff"
            c.waiting_message = (
                f"back-off {c.backoff_delay:g}s restarting failed container={c.name} "
                f"pod={self.pod_name}_{self.namespace}({self.uid})"
            )
        else:
            c.termination = termination
            if c.init and termination.exit_code != 0:
                self.init_failed = True

    def _probe(self, c: Container) -> None:
        now = time.monotonic()
        if c.startup is not None and not c.startup.result:
            if c.startup.due(now):
                self._run_probe(c, c.startup, now)
                if c.startup.failed:
                    self._kill_for_probe(c, c.startup)
            return
        for prober in (c.liveness, c.readiness):
            if prober is not None and prober.due(now):
                self._run_probe(c, prober, now)
        if c.liveness is not None and c.liveness.failed:
            self._kill_for_probe(c, c.liveness)

    def _run_probe(self, c: Container, prober: Prober, now: float) -> None:
        pid = c.proc.pid if c.proc else None
        ok, message = run_probe(prober.spec, self.pod_ip, c.spec, c.env, pid)
        if not ok and (prober.kind != "liveness" or prober.failed):
            self.events.record(
                "Unhealthy", f"{prober.kind.capitalize()} probe failed: {message}", True, c.name
            )
        if prober.record(ok, message, now):
            log.info(
                "pod %s/%s: %s probe of %s -> %s %s",
                self.namespace,
                self.pod_name,
                prober.kind,
                c.name,
                ok,
                message,
            )

    def _kill_for_probe(self, c: Container, prober: Prober) -> None:
        grace = prober.spec.get("terminationGracePeriodSeconds")
        termination = c.stop(
            float(grace)
            if grace is not None
            else float(self.pod["spec"].get("terminationGracePeriodSeconds", 30))
        )
        if termination is None:
            return
        termination.message = (
            f"Container {c.name} failed {prober.kind} probe, will be restarted: {prober.message}"
        )
        self.events.record("Killing", termination.message, False, c.name, once=False)
        self._on_exit(c, termination)

    # ----------------------------------------------------------------------------------- status
    def _phase(self) -> str:
        return phase(
            [c.status() for c in self.containers],
            [c.status() for c in self.init_containers],
            self.restart_policy,
            self.init_failed,
        )

    def _status(self, final_phase: str | None = None) -> JSON:
        statuses = [c.status() for c in self.containers]
        init_statuses = [c.status() for c in self.init_containers]
        if not self.sandbox_ready and self.sandbox_message:
            for s in statuses + init_statuses:
                if "waiting" in s["state"]:
                    s["state"]["waiting"]["message"] = self.sandbox_message
        pod_phase = final_phase or self._phase()
        init_done = all(self._succeeded(c) for c in self.init_containers)
        unready = [c.name for c in self.containers if not c.ready]
        gates = [g["conditionType"] for g in self.pod["spec"].get("readinessGates", [])]
        foreign = [c for c in self.pod.get("status", {}).get("conditions", [])]
        gate_ok = all(any(f["type"] == g and f["status"] == "True" for f in foreign) for g in gates)
        completed = pod_phase in TERMINAL
        self.conditions.set("PodScheduled", True)
        self.conditions.set("PodReadyToStartContainers", self.sandbox_ready and not completed)
        pending_init = [c.name for c in self.init_containers if not self._succeeded(c)]
        self.conditions.set(
            "Initialized",
            init_done,
            "ContainersNotInitialized",
            f"containers with incomplete status: [{' '.join(pending_init)}]",
        )
        reason = "PodCompleted" if completed else "ContainersNotReady"
        message = f"containers with unready status: [{' '.join(unready)}]"
        self.conditions.set("ContainersReady", not unready and not completed, reason, message)
        self.conditions.set(
            "Ready",
            not unready and gate_ok and not completed,
            reason if unready or completed else "ReadinessGatesNotReady",
            message,
        )
        status: JSON = {
            "phase": pod_phase,
            "conditions": self.conditions.list(foreign),
            "hostIP": self.host_ip,
            "hostIPs": [{"ip": self.host_ip}],
            "podIP": self.pod_ip,
            "podIPs": [{"ip": self.pod_ip}],
            "startTime": self.start_time,
            "containerStatuses": statuses,
        }
        if init_statuses:
            status["initContainerStatuses"] = init_statuses
        return status

    def _push_status(self, final_phase: str | None = None) -> None:
        status = self._status(final_phase)
        if status == self._last_status:
            return
        # The uid is a precondition (409 otherwise), as the kubelet's: once this pod is gone, a
        # successor of the same name (a StatefulSet's) must never get this pod's status.
        patch = {"metadata": {"uid": self.uid}, "status": status}
        try:
            self.kube.merge_patch(pod_path(self.namespace, self.pod_name) + "/status", patch)
            self._last_status = status
        except ApiError as exc:
            if exc.status in (404, 409):
                self.mark_deleted()
            else:
                log.warning("pod %s/%s: status update failed: %s", self.namespace, self.pod_name, exc)

    # --------------------------------------------------------------------------------- deletion
    def _stop_all(self, grace: float, pre_stop: bool = False) -> list[tuple[Container, Termination | None]]:
        """Stop every running container concurrently ([preStop hook], SIGTERM, `grace`, SIGKILL)."""
        results: list[tuple[Container, Termination | None]] = []
        running = [c for c in self.init_containers + self.containers if c.running]
        deadline = time.monotonic() + grace

        def stop(c: Container) -> None:
            hook = (c.spec.get("lifecycle") or {}).get("preStop")
            if pre_stop and hook:
                self._run_pre_stop(c, hook, grace)
            results.append((c, c.stop(max(deadline - time.monotonic(), 0.0))))

        threads = [threading.Thread(target=stop, args=(c,), daemon=True) for c in running]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return results

    def _run_pre_stop(self, c: Container, hook: JSON, grace: float) -> None:
        """Run a preStop hook (exec, httpGet, tcpSocket or sleep), bounded by the grace period."""
        try:
            if "sleep" in hook:
                time.sleep(min(float(hook["sleep"].get("seconds", 0)), grace))
                return
            spec = dict(hook)
            spec["timeoutSeconds"] = max(grace, 1.0)
            ok, message = run_probe(spec, self.pod_ip, c.spec, c.env, c.proc.pid if c.proc else None)
            if not ok:
                self.events.record("FailedPreStopHook", f"PreStopHook failed: {message}", True, c.name)
        except Exception as exc:
            log.warning(
                "pod %s/%s: preStop hook of %s failed: %s", self.namespace, self.pod_name, c.name, exc
            )

    def _terminate_for_deletion(self) -> None:
        grace = self._grace()
        log.info("pod %s/%s: deleting (grace %ss)", self.namespace, self.pod_name, grace)
        for c in self.init_containers + self.containers:
            if c.running:
                self.events.record("Killing", f"Stopping container {c.name}", False, c.name)
        for c, termination in self._stop_all(grace, pre_stop=True):
            if termination is not None:
                c.termination = termination
        containers = self.containers
        ok = bool(containers) and all(self._succeeded(c) for c in containers)
        if not self.deleted.is_set():
            self._push_status("Succeeded" if ok else "Failed")
            body: dict[str, Any] = {
                "apiVersion": "v1",
                "kind": "DeleteOptions",
                "gracePeriodSeconds": 0,
                "preconditions": {"uid": self.uid},
            }
            try:
                self.kube.delete(pod_path(self.namespace, self.pod_name), body)
            except ApiError as exc:
                if exc.status not in (404, 409):
                    log.warning("pod %s/%s: final delete failed: %s", self.namespace, self.pod_name, exc)

    def _cleanup(self) -> None:
        if self.pod_ip and self.pod_ip != self.host_ip:
            self.ipam.release(self.pod_ip)
        shutil.rmtree(self.pod_dir / "volumes", ignore_errors=True)
        shutil.rmtree(self.pod_dir / "containers", ignore_errors=True)
