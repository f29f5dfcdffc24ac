"""One container of a pod as a local process: start (in a private mount namespace), watch, stop."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil

from localcluster.agent import images
from localcluster.agent.env import expand
from localcluster.agent.kube import JSON
from localcluster.agent.probes import Prober
from localcluster.agent.volumes import Mount, mount_script, prepare_targets

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _child_on_path(path: str, directory: str) -> str:
    """The entry of `directory` that `path` (inside it) goes through: /tmp, /tmp/a/b/c -> /tmp/a."""
    target = os.path.realpath(directory)
    relative = os.path.relpath(os.path.realpath(path), target)
    return os.path.join(target, relative.split(os.sep)[0])


def _is_within(path: str, directory: str) -> bool:
    """True if `path` lies inside `directory` (a mount there would hide it)."""
    target = os.path.realpath(directory)
    if target == "/":
        return False
    prefix = target.rstrip("/") + "/"
    return any(p == target or p.startswith(prefix) for p in (os.path.abspath(path), os.path.realpath(path)))


class StartError(Exception):
    """The container process could not be started (kubelet: StartError / RunContainerError)."""


@dataclass
class Termination:
    exit_code: int
    reason: str
    message: str
    started_at: str
    finished_at: str
    signal: int = 0

    def to_state(self, container_id: str) -> JSON:
        state: JSON = {
            "exitCode": self.exit_code,
            "reason": self.reason,
            "startedAt": self.started_at,
            "finishedAt": self.finished_at,
            "containerID": container_id,
        }
        if self.message:
            state["message"] = self.message
        if self.signal:
            state["signal"] = self.signal
        return {"terminated": state}


class Container:
    """Runtime state of one container (init or regular) across its restarts."""

    def __init__(self, spec: JSON, pod_dir: Path, pod_uid: str, init: bool = False) -> None:
        self.spec = spec
        self.name: str = spec["name"]
        self.image: str = spec.get("image", "")
        self.init = init
        self.pod_dir = pod_dir
        self.pod_uid = pod_uid
        self.proc: subprocess.Popen[bytes] | None = None
        self.pid_create_time = 0.0
        self.started_at = ""
        self.started_mono = 0.0
        self.restart_count = 0
        self.runs = 0
        self.waiting_reason = "ContainerCreating"
        self.waiting_message = ""
        self.termination: Termination | None = None  # current state is terminated (no restart pending)
        self.last_termination: Termination | None = None
        self.backoff_until = 0.0
        self.backoff_delay = 0.0
        self.env: dict[str, str] = {}
        self.readiness: Prober | None = None
        self.liveness: Prober | None = None
        self.startup: Prober | None = None
        self.stop_requested = False

    # --------------------------------------------------------------------------------- queries
    @property
    def running(self) -> bool:
        return self.proc is not None

    @property
    def started(self) -> bool:
        return self.running and (self.startup is None or self.startup.result)

    @property
    def ready(self) -> bool:
        if not self.started:
            return False
        return self.readiness is None or self.readiness.result

    @property
    def container_id(self) -> str:
        return f"localcluster://{self.pod_uid}/{self.name}/{self.runs}"

    @property
    def pidfile(self) -> Path:
        return self.pod_dir / "containers" / f"{self.name}.pid"

    @property
    def log_path(self) -> Path:
        return self.pod_dir / "logs" / f"{self.name}.log"

    def status(self) -> JSON:
        """The containerStatuses entry of this container."""
        state: JSON
        if self.running:
            state = {"running": {"startedAt": self.started_at}}
        elif self.termination is not None:
            state = self.termination.to_state(self.container_id)
        else:
            waiting: JSON = {"reason": self.waiting_reason}
            if self.waiting_message:
                waiting["message"] = self.waiting_message
            state = {"waiting": waiting}
        last = self.last_termination.to_state(self.container_id) if self.last_termination else {}
        status: JSON = {
            "name": self.name,
            "image": self.image,
            "imageID": images.image_id(self.image) if images.resolve(self.image) else "",
            "ready": self.ready,
            "started": self.started,
            "restartCount": self.restart_count,
            "state": state,
            "lastState": last,
        }
        if self.runs:
            status["containerID"] = self.container_id
        return status

    # ----------------------------------------------------------------------------- lifecycle
    def start(self, env: dict[str, str], mounts: list[Mount], mapping: images.ImageMapping) -> None:
        """Start the process; raises StartError if its executable cannot be found."""
        command = list(self.spec.get("command") or mapping.command)
        args = list(self.spec.get("args") or [])
        argv = [expand(a, env) for a in command + args]
        if not argv:
            raise StartError("no command specified")
        exe = argv[0] if "/" in argv[0] else shutil.which(argv[0], path=env.get("PATH", DEFAULT_PATH))
        if exe is None or not os.access(exe, os.X_OK):
            raise StartError(f'exec: "{argv[0]}": executable file not found in $PATH')
        # Containers share the host's filesystem here: a volume mounted over a directory that holds
        # the project's environment (say an emptyDir at /tmp while the clone lives in /tmp/x) would
        # hide it, so the directory just below the mount on that path is mounted back on top.
        exposed: list[Mount] = []
        for mount in mounts:
            for hidden in (exe, *mapping.path):
                if _is_within(hidden, mount.target):
                    root = _child_on_path(hidden, mount.target)
                    if all(m.target != root for m in exposed):
                        exposed.append(Mount(Path(root), root, False))
        mounts = [*mounts, *exposed]
        workdir = self.spec.get("workingDir") or str(self.pod_dir / "rootfs")
        # The default working directory lives in the pod's directory on the host: always create it.
        if not self.spec.get("workingDir") or not any(workdir.startswith(m.target) for m in mounts):
            Path(workdir).mkdir(parents=True, exist_ok=True)
        prepare_targets(mounts)
        wrapper = [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "--",
            "/bin/sh",
            "-c",
            mount_script(mounts, workdir, enter_first=not self.spec.get("workingDir")),
            "sh",
            exe,
            *argv[1:],
        ]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.pidfile.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                wrapper,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        with contextlib.suppress(psutil.Error):
            self.pid_create_time = psutil.Process(self.proc.pid).create_time()
        self.pidfile.write_text(f"{self.proc.pid} {self.pid_create_time}\n")
        self.env = env
        self.runs += 1
        self.started_at = now_rfc3339()
        self.started_mono = time.monotonic()
        self.termination = None
        self.waiting_reason = ""
        self.waiting_message = ""
        self.stop_requested = False
        self.readiness = self._prober("readiness")
        self.liveness = self._prober("liveness")
        self.startup = self._prober("startup")

    def _prober(self, kind: str) -> Prober | None:
        spec = self.spec.get(f"{kind}Probe")
        return Prober(kind, spec, time.monotonic()) if spec else None

    def poll(self) -> Termination | None:
        """If the process exited, record and return its termination."""
        if self.proc is None or self.proc.poll() is None:
            return None
        code = self.proc.returncode
        sig = -code if code < 0 else 0
        exit_code = 128 + sig if sig else code
        reason = "Completed" if exit_code == 0 else "Error"
        termination = Termination(exit_code, reason, "", self.started_at, now_rfc3339(), sig)
        self._reap_group()
        self.proc = None
        self.pidfile.unlink(missing_ok=True)
        return termination

    def start_failed(self, message: str) -> Termination:
        now = now_rfc3339()
        self.runs += 1
        return Termination(128, "StartError", message, now, now)

    def signal(self, sig: int) -> None:
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, sig)

    def stop(self, grace: float) -> Termination | None:
        """SIGTERM the process group, wait up to `grace` seconds, SIGKILL; returns the termination."""
        if self.proc is None:
            return None
        self.stop_requested = True
        self.signal(signal.SIGTERM)
        deadline = time.monotonic() + max(grace, 0.0)
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        if self.proc.poll() is None:
            self.signal(signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)
        return self.poll()

    def _reap_group(self) -> None:
        """Kill whatever the container left behind in its process group (like a container's cgroup)."""
        if self.proc is None:
            return
        pgid = self.proc.pid
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)

    def schedule_restart(self, backoff_initial: float, backoff_max: float, ran_for: float) -> None:
        """Compute the back-off before the next start (reset after a long healthy run)."""
        if ran_for > max(60.0, 2 * backoff_max):
            self.backoff_delay = 0.0
        self.backoff_delay = (
            backoff_initial if self.backoff_delay == 0 else min(self.backoff_delay * 2, backoff_max)
        )
        self.backoff_until = time.monotonic() + self.backoff_delay

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "running": self.running, "restarts": self.restart_count}
