"""The cluster secret: what every broker-to-broker connection must present.

CM -> MM links, MM -> MM replication and the MMs' heartbeats to the local controller all carry it
(the HELLO's ``password``, or ``Authorization: Bearer`` over HTTP); an MM, a CM and the local
controller refuse to start without one, so there is no unauthenticated mode to forget about (like
RabbitMQ's Erlang cookie, which its operator generates per cluster). Sources, first found wins:
the file named by ``HYBRIDMQ_CLUSTER_SECRET_FILE`` (``--cluster-secret-file``), then
``HYBRIDMQ_CLUSTER_SECRET``. Never a command-line value: ``ps`` would show it.
"""

from __future__ import annotations

import hmac
import os
import secrets
from collections.abc import Mapping
from pathlib import Path

ENV = "HYBRIDMQ_CLUSTER_SECRET"
FILE_ENV = "HYBRIDMQ_CLUSTER_SECRET_FILE"
MIN_LENGTH = 16


class ClusterSecretError(RuntimeError):
    """No usable cluster secret: the process must not start."""


def generate() -> str:
    return secrets.token_urlsafe(32)


def load(path: str | Path | None = None, environ: Mapping[str, str] | None = None) -> str:
    """The configured secret; ``ClusterSecretError`` with what to set when there is none."""
    env = os.environ if environ is None else environ
    path = path or env.get(FILE_ENV)
    if path:
        try:
            value = Path(path).read_text().strip()
        except OSError as exc:
            raise ClusterSecretError(f"cannot read the cluster secret file {path}: {exc}") from None
        source = str(path)
    else:
        value, source = env.get(ENV, "").strip(), ENV
    return require(value, source)


def require(value: str | None, source: str = "the configuration") -> str:
    if not value:
        raise ClusterSecretError(
            f"no cluster secret: set {FILE_ENV} (or --cluster-secret-file) or {ENV}; every CM and MM "
            "of a cluster needs the same one (the operator puts it in the Secret <cluster>-cluster-secret)"
        )
    if len(value) < MIN_LENGTH:
        raise ClusterSecretError(f"the cluster secret from {source} is shorter than {MIN_LENGTH} characters")
    return value


def matches(expected: str, presented: object) -> bool:
    """Constant-time comparison of what a peer presented with the configured secret."""
    if not isinstance(presented, str):
        return False
    return hmac.compare_digest(expected.encode(), presented.encode())


def write_file(path: Path, secret: str) -> Path:
    """Write ``secret`` readable by this user only (0600 from the start, never world-readable)."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secret)
    return path


def bearer(secret: str) -> dict[str, str]:
    """HTTP headers that present the secret to the local controller."""
    return {"Authorization": f"Bearer {secret}"}


def bearer_matches(expected: str, header: str | None) -> bool:
    scheme, _, token = (header or "").partition(" ")
    return scheme == "Bearer" and matches(expected, token)
