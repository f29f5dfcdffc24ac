"""Kubeconfig files with embedded client certificates."""

from __future__ import annotations

import base64
from pathlib import Path

import yaml

from localcluster.certs import CertPair


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def write_kubeconfig(
    path: Path,
    server: str,
    ca_cert: Path,
    client: CertPair,
    cluster_name: str = "localcluster",
    user: str = "admin",
) -> Path:
    """Write a kubeconfig for `server` authenticating with the client certificate `client`."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": cluster_name,
                "cluster": {"server": server, "certificate-authority-data": _b64(ca_cert.read_bytes())},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": _b64(client.cert_pem),
                    "client-key-data": _b64(client.key_pem),
                },
            }
        ],
        "contexts": [{"name": cluster_name, "context": {"cluster": cluster_name, "user": user}}],
        "current-context": cluster_name,
        "preferences": {},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path
