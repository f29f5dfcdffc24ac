"""The cluster CA's Secrets and the decision to (re)issue the brokers' certificate.

Three Secrets per BrokerCluster with TLS on and no ``tls.secretName`` of its own (Strimzi's shape):

* ``<c>-cluster-ca``: the CA's key, certificate and revocation list. Created once (the operator
  reads it back to sign); a CA of another cluster never signs these brokers.
* ``<c>-broker-tls``: ``tls.crt``/``tls.key`` (one certificate for every CM and MM: server and
  client use, the Services' DNS names, ``localhost`` and 127.0.0.1 for ``kubectl port-forward``),
  ``ca.crt`` and ``ca.crl``. Mounted into every broker pod; the brokers re-read it when the kubelet
  updates the files, so a renewed certificate is taken up without a restart.
* ``<c>-cluster-ca-cert``: ``ca.crt`` alone, for clients.

The builders are pure; ``broker_cert_due`` decides, from what the current certificate says, whether
a new one must be issued.
"""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Mapping

from hybridmq.pki import CertInfo
from hybridmq_operator import names
from hybridmq_operator.resources.common import Manifest, metadata
from hybridmq_operator.settings import ClusterSettings

CERT_DAYS = 90
RENEW_BEFORE = dt.timedelta(days=30)
CA_DAYS = 5 * 365
PORT_FORWARD_IPS = ("127.0.0.1",)


def tls_enabled(settings: ClusterSettings) -> bool:
    return bool(settings.tls.get("enabled", True))


def broker_tls_secret(settings: ClusterSettings) -> str | None:
    """The Secret the brokers mount (the user's own, e.g. cert-manager's, or the operator's); None
    when the cluster runs plain TCP."""
    if not tls_enabled(settings):
        return None
    return str(settings.tls.get("secretName") or names.broker_tls_secret_name(settings.name))


def operator_issues(settings: ClusterSettings) -> bool:
    """Whether the operator's cluster CA signs this cluster's brokers."""
    return tls_enabled(settings) and not settings.tls.get("secretName")


def broker_dns_names(settings: ClusterSettings) -> list[str]:
    ns = settings.namespace
    out: list[str] = []
    for svc in (
        names.client_service_name(settings.name),
        names.headless_service_name(settings.name, names.ROLE_CM),
        names.headless_service_name(settings.name, names.ROLE_MM),
    ):
        out += [svc, f"{svc}.{ns}", f"{svc}.{ns}.svc", f"{svc}.{ns}.svc.cluster.local"]
    for role in (names.ROLE_CM, names.ROLE_MM):
        out.append(f"*.{names.headless_service_name(settings.name, role)}.{ns}.svc")
    out.append("localhost")
    return out


def broker_cert_due(
    current: CertInfo | None, ca_key_id: bytes, settings: ClusterSettings, now: dt.datetime
) -> str | None:
    """Why the brokers need a new certificate (None: the current one stays)."""
    if current is None:
        return "no certificate yet"
    if current.issuer_key_id != ca_key_id:
        return "signed by another CA"
    if current.not_after - RENEW_BEFORE <= now:
        return f"expires {current.not_after.isoformat()}"
    if current.dns_names != frozenset(broker_dns_names(settings)):
        return "the Services' names changed"
    return None


def encode_data(files: Mapping[str, str]) -> dict[str, str]:
    return {k: base64.b64encode(v.encode()).decode() for k, v in files.items()}


def decode(secret: Mapping[str, object] | None) -> dict[str, str]:
    """A Secret's data as text (empty when there is no Secret)."""
    data = (secret or {}).get("data") or {}
    assert isinstance(data, Mapping)
    return {str(k): base64.b64decode(str(v)).decode() for k, v in data.items()}


def _secret(settings: ClusterSettings, name: str, files: Mapping[str, str], kind: str = "Opaque") -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata(settings, name),
        "type": kind,
        "data": encode_data(files),
    }


def build_ca_secret(settings: ClusterSettings, cert: str, key: str, crl: str) -> Manifest:
    return _secret(
        settings, names.ca_secret_name(settings.name), {"ca.crt": cert, "ca.key": key, "ca.crl": crl}
    )


def build_ca_cert_secret(settings: ClusterSettings, ca_cert: str) -> Manifest:
    return _secret(settings, names.ca_cert_secret_name(settings.name), {"ca.crt": ca_cert})


def build_broker_tls_secret(
    settings: ClusterSettings, cert: str, key: str, ca_cert: str, crl: str
) -> Manifest:
    files = {"tls.crt": cert, "tls.key": key, "ca.crt": ca_cert, "ca.crl": crl}
    return _secret(settings, names.broker_tls_secret_name(settings.name), files, "kubernetes.io/tls")
