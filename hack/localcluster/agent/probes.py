"""Readiness, liveness and startup probes: httpGet, tcpSocket, exec (grpc as a TCP connect)."""

from __future__ import annotations

import http.client
import socket
import ssl
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from localcluster.agent.kube import JSON


def resolve_port(port: int | str, container: JSON) -> int:
    """A probe port: a number, or the name of one of the container's ports."""
    if isinstance(port, int) or str(port).isdigit():
        return int(port)
    for declared in container.get("ports", []):
        if declared.get("name") == port:
            return int(declared["containerPort"])
    raise ValueError(f"port {port!r} is not declared by container {container['name']}")


def _http_get(spec: JSON, pod_ip: str, container: JSON, timeout: float) -> tuple[bool, str]:
    host = spec.get("host") or pod_ip
    port = resolve_port(spec["port"], container)
    path = spec.get("path", "/") or "/"
    conn: http.client.HTTPConnection
    if spec.get("scheme", "HTTP").upper() == "HTTPS":
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        conn = http.client.HTTPSConnection(host, port, timeout=timeout, context=ctx)
    else:
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
    headers = {h["name"]: h["value"] for h in spec.get("httpHeaders", [])}
    headers.setdefault("User-Agent", "kube-probe/1.35")
    try:
        conn.request("GET", path, headers=headers)
        status = conn.getresponse().status
    finally:
        conn.close()
    if 200 <= status < 400:
        return True, ""
    return False, f"HTTP probe failed with statuscode: {status}"


def _tcp(spec: JSON, pod_ip: str, container: JSON, timeout: float) -> tuple[bool, str]:
    host = spec.get("host") or pod_ip
    port = resolve_port(spec["port"], container)
    with socket.create_connection((host, port), timeout=timeout):
        return True, ""


def _exec(spec: JSON, pid: int | None, env: Mapping[str, str], timeout: float) -> tuple[bool, str]:
    command = list(spec.get("command", []))
    if pid is not None:
        command = ["nsenter", f"--target={pid}", "--mount", "--", *command]
    try:
        result = subprocess.run(command, env=dict(env), capture_output=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return False, f"command timed out after {timeout}s"
    if result.returncode == 0:
        return True, ""
    output = (result.stdout + result.stderr).decode("utf-8", "replace").strip()
    return False, f"command exited with {result.returncode}: {output[:200]}"


def run_probe(
    spec: JSON, pod_ip: str, container: JSON, env: Mapping[str, str], pid: int | None
) -> tuple[bool, str]:
    """Run a probe once; returns (success, message)."""
    timeout = float(spec.get("timeoutSeconds", 1))
    try:
        if "httpGet" in spec:
            return _http_get(spec["httpGet"], pod_ip, container, timeout)
        if "tcpSocket" in spec:
            return _tcp(spec["tcpSocket"], pod_ip, container, timeout)
        if "grpc" in spec:
            return _tcp({"port": spec["grpc"]["port"]}, pod_ip, container, timeout)
        if "exec" in spec:
            return _exec(spec["exec"], pid, env, timeout)
    except (OSError, ValueError, http.client.HTTPException) as exc:
        return False, f"{type(exc).__name__}: {exc}"
    return True, "no probe handler"


@dataclass
class Prober:
    """The state of one probe of one container run (threshold counting, schedule)."""

    kind: str  # "readiness" | "liveness" | "startup"
    spec: JSON
    started_at: float
    result: bool = field(init=False)
    message: str = ""
    _next_at: float = field(init=False)
    _successes: int = 0
    _failures: int = 0

    def __post_init__(self) -> None:
        self.result = self.kind == "liveness"
        self._next_at = self.started_at + float(self.spec.get("initialDelaySeconds", 0))

    @property
    def period(self) -> float:
        return float(self.spec.get("periodSeconds", 10))

    def due(self, now: float) -> bool:
        return now >= self._next_at

    def record(self, success: bool, message: str, now: float) -> bool:
        """Account one probe result; returns True if the probe's overall result changed."""
        self._next_at = now + self.period
        before = self.result
        if success:
            self._successes += 1
            self._failures = 0
            if self._successes >= int(self.spec.get("successThreshold", 1)):
                self.result = True
        else:
            self._failures += 1
            self._successes = 0
            self.message = message
            if self._failures >= int(self.spec.get("failureThreshold", 3)):
                self.result = False
        return before != self.result

    @property
    def failed(self) -> bool:
        """Liveness/startup: the failure threshold was reached (the container must be killed)."""
        return self._failures >= int(self.spec.get("failureThreshold", 3))


def monotonic() -> float:
    return time.monotonic()
