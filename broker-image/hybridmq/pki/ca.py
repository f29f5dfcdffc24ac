"""Issue a CA, broker certificates (server and client use: brokers link to each other with mutual
TLS) and the CA's revocation list, as PEM text. Keys are ECDSA P-256: a handshake costs a fraction
of an RSA one, which matters when many clients reconnect at once."""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Issued:
    cert: str  # PEM
    key: str  # PEM (PKCS#8, unencrypted: it lives in a Secret or a 0600 file)


CN_MAX = 64  # X.509 upper bound of a common name


def _cn(common_name: str, organizations: Iterable[str] = ()) -> x509.Name:
    # Names come from Kubernetes objects (a namespace alone may be 63 characters): keep the start.
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    return x509.Name([*attrs, x509.NameAttribute(NameOID.COMMON_NAME, common_name[:CN_MAX])])


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def new_ca(common_name: str, days: int = 3650) -> Issued:
    key = _key()
    name = _cn(common_name)
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return Issued(cert.public_bytes(serialization.Encoding.PEM).decode(), _pem_key(key))


def _load_ca(ca: Issued) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    cert = x509.load_pem_x509_certificate(ca.cert.encode())
    key = serialization.load_pem_private_key(ca.key.encode(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError("the CA key must be an EC key")
    return cert, key


def issue(
    ca: Issued,
    common_name: str,
    *,
    dns_names: Iterable[str] = (),
    ip_addresses: Iterable[str] = (),
    days: int = 90,
    organizations: Iterable[str] = (),
    server: bool = True,
    client: bool = True,
) -> Issued:
    """A certificate for one broker role (or one user), valid for server and client authentication
    unless ``server`` or ``client`` says otherwise. ``organizations`` go in the subject (Kubernetes
    reads them as the groups of a client certificate)."""
    ca_cert, ca_key = _load_ca(ca)
    usages = [ExtendedKeyUsageOID.SERVER_AUTH] if server else []
    usages += [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
    key = _key()
    now = _now()
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dict.fromkeys(dns_names)]
    sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in dict.fromkeys(ip_addresses)]
    builder = (
        x509.CertificateBuilder()
        .subject_name(_cn(common_name, organizations))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return Issued(cert.public_bytes(serialization.Encoding.PEM).decode(), _pem_key(key))


def revocation_list(ca: Issued, revoked_serials: Iterable[int] = (), days: int = 30) -> str:
    """The CA's CRL (PEM): brokers that have one refuse the certificates it lists."""
    ca_cert, ca_key = _load_ca(ca)
    now = _now()
    builder = (
        x509.CertificateRevocationListBuilder()
        .issuer_name(ca_cert.subject)
        .last_update(now - dt.timedelta(minutes=5))
        .next_update(now + dt.timedelta(days=days))
    )
    for serial in sorted(set(revoked_serials)):
        builder = builder.add_revoked_certificate(
            x509.RevokedCertificateBuilder().serial_number(serial).revocation_date(now).build()
        )
    crl = builder.sign(ca_key, hashes.SHA256())
    return crl.public_bytes(serialization.Encoding.PEM).decode()


def serial_of(cert_pem: str) -> int:
    return int(x509.load_pem_x509_certificate(cert_pem.encode()).serial_number)


@dataclass(frozen=True)
class CertInfo:
    serial: int
    not_after: dt.datetime
    dns_names: frozenset[str]
    ip_addresses: frozenset[str]
    issuer_key_id: bytes | None  # the signing CA's key identifier


def describe(cert_pem: str) -> CertInfo:
    """What a rotation decision needs to know of a certificate (``ValueError`` if unreadable)."""
    cert = x509.load_pem_x509_certificate(cert_pem.encode())
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        dns, ips = sans.get_values_for_type(x509.DNSName), sans.get_values_for_type(x509.IPAddress)
    except x509.ExtensionNotFound:
        dns, ips = [], []
    try:
        aki = cert.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value.key_identifier
    except x509.ExtensionNotFound:
        aki = None
    return CertInfo(
        int(cert.serial_number),
        cert.not_valid_after_utc,
        frozenset(dns),
        frozenset(str(i) for i in ips),
        aki,
    )


def key_id(ca_cert_pem: str) -> bytes:
    """The CA's subject key identifier (what the certificates it signs name as their issuer)."""
    cert = x509.load_pem_x509_certificate(ca_cert_pem.encode())
    return bytes(x509.SubjectKeyIdentifier.from_public_key(cert.public_key()).digest)


def write_tls_dir(directory: Path, files: dict[str, str]) -> Path:
    """Write ``name -> PEM`` into ``directory`` (mode 0700), each file replaced atomically (0600)."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    for name, text in files.items():
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name}.")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, directory / name)
    return directory
