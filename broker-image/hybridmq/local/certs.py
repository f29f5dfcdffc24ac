"""The throwaway CA of ``hybridmq local --tls``: made fresh for each run, for loopback only."""

from __future__ import annotations

from pathlib import Path

from hybridmq.protocol.tls import CA, CERT, CRL, KEY

LOCAL_NAMES = ("localhost",)
LOCAL_IPS = ("127.0.0.1", "::1")


def make_local_tls(directory: Path) -> tuple[Path, Path]:
    """Write ``<directory>/tls/`` (the brokers' certificate, key, CA and an empty revocation list) and
    ``<directory>/ca.crt`` (for clients); returns both paths. The CA's key is not kept."""
    try:
        from hybridmq import pki
    except ImportError as exc:  # the cryptography package: in the dev and operator extras
        raise SystemExit(f"hybridmq local --tls needs the cryptography package: {exc}") from None
    ca = pki.new_ca("hybridmq local CA", days=30)
    broker = pki.issue(ca, "hybridmq-local-broker", dns_names=LOCAL_NAMES, ip_addresses=LOCAL_IPS, days=30)
    tls_dir = pki.write_tls_dir(
        directory / "tls",
        {CERT: broker.cert, KEY: broker.key, CA: ca.cert, CRL: pki.revocation_list(ca)},
    )
    pki.write_tls_dir(directory, {"ca.crt": ca.cert})
    return tls_dir, directory / "ca.crt"
