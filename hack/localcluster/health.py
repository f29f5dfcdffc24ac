"""Polling HTTP(S) health endpoints of the control-plane components."""

from __future__ import annotations

import http.client
import ssl
import time
from collections.abc import Callable
from pathlib import Path

from localcluster.certs import CertPair


def tls_context(ca: Path | None = None, client: CertPair | None = None) -> ssl.SSLContext:
    """A client TLS context: verify against `ca` (or not at all), optionally with a client cert."""
    if ca is None:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    else:
        ctx = ssl.create_default_context(cafile=str(ca))
    if client is not None:
        ctx.load_cert_chain(str(client.cert_path), str(client.key_path))
    return ctx


def get(host: str, port: int, path: str, ctx: ssl.SSLContext | None, timeout: float = 2.0) -> tuple[int, str]:
    """GET `path`; returns (status, body). Raises OSError on connection problems."""
    conn: http.client.HTTPConnection
    if ctx is None:
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
    else:
        conn = http.client.HTTPSConnection(host, port, timeout=timeout, context=ctx)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read().decode("utf-8", "replace")
    finally:
        conn.close()


def wait_until(
    what: str,
    check: Callable[[], bool],
    timeout: float,
    progress: Callable[[str], None],
    alive: Callable[[], bool] | None = None,
    interval: float = 0.2,
) -> None:
    """Poll `check` until it returns True; raise TimeoutError after `timeout` seconds.

    `alive` (optional) is checked too: if the component died, fail at once instead of waiting.
    """
    start = time.monotonic()
    last_report = start
    while True:
        try:
            if check():
                progress(f"{what}: ok ({time.monotonic() - start:.1f}s)")
                return
        except (OSError, ssl.SSLError, http.client.HTTPException):
            pass
        if alive is not None and not alive():
            raise RuntimeError(f"{what}: the process exited (see its log)")
        now = time.monotonic()
        if now - start > timeout:
            raise TimeoutError(f"{what}: not healthy after {timeout:.0f}s")
        if now - last_report > 5:
            progress(f"{what}: still waiting ({now - start:.0f}s)")
            last_report = now
        time.sleep(interval)


def http_ok(host: str, port: int, path: str, ctx: ssl.SSLContext | None) -> bool:
    status, _ = get(host, port, path, ctx)
    return status == 200
