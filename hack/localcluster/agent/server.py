"""The agent's HTTPS endpoint (the kubelet API subset the API server proxies to): container logs.

`kubectl logs [-f] [--tail N]` works: the API server connects to the node's InternalIP and
`daemonEndpoints.kubeletEndpoint.Port` with its kubelet client certificate; this server checks that
certificate against the cluster CA and serves `/containerLogs/<ns>/<pod>/<container>` from the
container's log file. exec, attach and port-forward are not supported (501).
"""

from __future__ import annotations

import contextlib
import logging
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

log = logging.getLogger("localcluster.agent.server")


def find_log(pods_dir: Path, namespace: str, pod: str, container: str) -> Path | None:
    """The log file of the most recent pod named `pod` in `namespace`."""
    candidates = [p for p in pods_dir.glob(f"{namespace}_{pod}_*/logs/{container}.log") if p.exists()]
    if not candidates:
        return None
    return max(candidates, key=lambda p: p.parent.parent.stat().st_mtime)


def _tail(data: bytes, lines: int) -> bytes:
    if lines < 0:
        return data
    if lines == 0:
        return b""
    parts = data.splitlines(keepends=True)
    return b"".join(parts[-lines:])


class _Handler(BaseHTTPRequestHandler):
    server: KubeletServer

    def log_message(self, format: str, *args: object) -> None:
        log.debug("%s - %s", self.address_string(), format % args)

    def do_GET(self) -> None:
        url = urlparse(self.path)
        parts = [p for p in url.path.split("/") if p]
        if parts == ["healthz"]:
            self._reply(200, b"ok")
            return
        if len(parts) != 4 or parts[0] != "containerLogs":
            self._reply(501, b"the localcluster node agent serves only /containerLogs and /healthz\n")
            return
        _, namespace, pod, container = parts
        query = parse_qs(url.query)
        path = find_log(self.server.pods_dir, namespace, pod, container)
        if path is None:
            self._reply(404, f"no logs for {namespace}/{pod}/{container}\n".encode())
            return
        tail = int(query.get("tailLines", ["-1"])[0])
        limit = int(query.get("limitBytes", ["0"])[0])
        follow = query.get("follow", ["false"])[0] == "true"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        with open(path, "rb") as f:
            data = _tail(f.read(), tail)
            if limit > 0:
                data = data[:limit]
            self.wfile.write(data)
            self.wfile.flush()
            while follow and not self.server.stopping.is_set():
                chunk = f.read(65536)
                if chunk:
                    self.wfile.write(chunk)
                    self.wfile.flush()
                elif not path.parent.parent.exists():
                    return
                else:
                    time.sleep(0.2)

    def _reply(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class KubeletServer(ThreadingHTTPServer):
    """HTTPS on 127.0.0.1:<port>, client certificates required (signed by the cluster CA)."""

    daemon_threads = True

    def __init__(self, port: int, cert: Path, key: Path, ca: Path, pods_dir: Path) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.pods_dir = pods_dir
        self.stopping = threading.Event()
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(ca))
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_cert_chain(str(cert), str(key))
        self.socket = ctx.wrap_socket(self.socket, server_side=True)

    def handle_error(self, request: object, client_address: object) -> None:
        log.debug("kubelet API request from %s failed", client_address, exc_info=True)

    def start(self) -> None:
        threading.Thread(target=self.serve_forever, name="kubelet-api", daemon=True).start()

    def stop(self) -> None:
        self.stopping.set()
        with contextlib.suppress(Exception):
            self.shutdown()
