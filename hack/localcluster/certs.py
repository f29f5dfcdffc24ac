"""Certificates and keys for the local control plane, written as files for its components.

One CA (``hybridmq.pki``, the CA the operator and ``hybridmq local --tls`` use) signs the API
server's serving certificate and every client certificate (admin, controller-manager, scheduler,
node). The service-account signing key is a separate RSA key.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from hybridmq import pki

VALIDITY_DAYS = 365


@dataclass(frozen=True)
class CertPair:
    """A PEM certificate and its PEM private key, as written to disk."""

    cert_path: Path
    key_path: Path

    @property
    def cert_pem(self) -> bytes:
        return self.cert_path.read_bytes()

    @property
    def key_pem(self) -> bytes:
        return self.key_path.read_bytes()


def _write(pair_dir: Path, stem: str, issued: pki.Issued) -> CertPair:
    pair_dir.mkdir(parents=True, exist_ok=True)
    cert_path = pair_dir / f"{stem}.crt"
    key_path = pair_dir / f"{stem}.key"
    cert_path.write_text(issued.cert)
    key_path.write_text(issued.key)
    key_path.chmod(0o600)
    return CertPair(cert_path, key_path)


class CertificateAuthority:
    """A self-signed CA that issues serving and client certificates into a directory."""

    def __init__(self, directory: Path, common_name: str = "localcluster-ca") -> None:
        self.directory = directory
        self._ca = pki.new_ca(common_name, days=VALIDITY_DAYS * 10)
        self.pair = _write(directory, "ca", self._ca)

    def issue(
        self,
        stem: str,
        common_name: str,
        organizations: tuple[str, ...] = (),
        dns_names: tuple[str, ...] = (),
        ip_addresses: tuple[str, ...] = (),
        server: bool = False,
        client: bool = True,
    ) -> CertPair:
        """Issue a certificate signed by this CA and write `<stem>.crt`/`<stem>.key`."""
        issued = pki.issue(
            self._ca,
            common_name,
            dns_names=dns_names,
            ip_addresses=ip_addresses,
            days=VALIDITY_DAYS,
            organizations=organizations,
            server=server,
            client=client,
        )
        return _write(self.directory, stem, issued)


def write_service_account_keys(directory: Path) -> tuple[Path, Path]:
    """Write the RSA key pair that signs service-account tokens; returns (private, public) paths."""
    directory.mkdir(parents=True, exist_ok=True)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = directory / "sa.key"
    public = directory / "sa.pub"
    private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    private.chmod(0o600)
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return private, public
