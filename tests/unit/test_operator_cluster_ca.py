"""The cluster CA's pure side: which Secret the brokers mount, what their pods say about TLS, when
the brokers' certificate is (re)issued, and that what is issued verifies as a client would check it."""

from __future__ import annotations

import dataclasses
import datetime as dt
import ssl
from pathlib import Path
from typing import Any

from cryptography import x509

from hybridmq import pki
from hybridmq_operator.resources import build_cm_statefulset, build_mm_statefulset
from hybridmq_operator.resources.tls import (
    CERT_DAYS,
    PORT_FORWARD_IPS,
    broker_cert_due,
    broker_dns_names,
)
from hybridmq_operator.settings import ClusterSettings

NOW = dt.datetime(2026, 6, 1, tzinfo=dt.UTC)


def settings(**spec: Any) -> ClusterSettings:
    return ClusterSettings.from_body(
        {
            "apiVersion": "hybridmq.io/v1alpha1",
            "kind": "BrokerCluster",
            "metadata": {"name": "orders", "namespace": "shop", "uid": "u1", "generation": 1},
            "spec": spec,
        }
    )


def pod(sts: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    spec = sts["spec"]["template"]["spec"]
    return spec, spec["containers"][0]


def test_tls_is_on_by_default_with_the_operators_certificate() -> None:
    for sts in (build_cm_statefulset(settings()), build_mm_statefulset(settings())):
        spec, container = pod(sts)
        vols = {v["name"]: v for v in spec["volumes"]}
        assert vols["tls"]["secret"]["secretName"] == "orders-broker-tls"
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["HYBRIDMQ_TLS_DIR"] == "/etc/hybridmq-tls"
        assert {"name": "tls", "mountPath": "/etc/hybridmq-tls", "readOnly": True} in container[
            "volumeMounts"
        ]
        assert container["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
        assert container["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"


def test_plain_tcp_only_when_the_cluster_says_so() -> None:
    for sts in (build_cm_statefulset(settings(tls={"enabled": False})),):
        spec, container = pod(sts)
        assert "tls" not in {v["name"] for v in spec["volumes"]}
        assert "HYBRIDMQ_TLS_DIR" not in {e["name"] for e in container["env"]}
        assert container["readinessProbe"]["httpGet"]["scheme"] == "HTTP"


def test_a_secret_of_ones_own_replaces_the_operators_certificate() -> None:
    spec, _ = pod(build_mm_statefulset(settings(tls={"secretName": "from-cert-manager"})))
    assert {v["name"]: v for v in spec["volumes"]}["tls"]["secret"]["secretName"] == "from-cert-manager"


def _issued(ca: pki.Issued, s: ClusterSettings, days: int = CERT_DAYS) -> pki.CertInfo:
    cert = pki.issue(ca, "b", dns_names=broker_dns_names(s), ip_addresses=PORT_FORWARD_IPS, days=days)
    return pki.describe(cert.cert)


def test_when_the_brokers_certificate_is_due() -> None:
    s = settings()
    ca = pki.new_ca("ca")
    now = dt.datetime.now(dt.UTC)
    assert broker_cert_due(None, pki.key_id(ca.cert), s, now) == "no certificate yet"
    assert broker_cert_due(_issued(ca, s), pki.key_id(ca.cert), s, now) is None
    other = pki.new_ca("another ca")
    assert broker_cert_due(_issued(other, s), pki.key_id(ca.cert), s, now) == "signed by another CA"
    due = broker_cert_due(_issued(ca, s, days=20), pki.key_id(ca.cert), s, now)
    assert due is not None and due.startswith("expires")
    # 61 days from now a 90-day certificate is inside its last 30 days: renewed then.
    later = now + dt.timedelta(days=61)
    assert broker_cert_due(_issued(ca, s), pki.key_id(ca.cert), s, later) is not None
    renamed = dataclasses.replace(s, namespace="elsewhere")
    assert broker_cert_due(_issued(ca, s), pki.key_id(ca.cert), renamed, now) == "the Services' names changed"


def test_the_issued_certificate_verifies_for_the_services_names(tmp_path: Path) -> None:
    """What a client checks: the chain up to the cluster CA and the name it connects to."""
    s = settings()
    ca = pki.new_ca("ca")
    broker = pki.issue(ca, "b", dns_names=broker_dns_names(s), ip_addresses=PORT_FORWARD_IPS)
    cert = x509.load_pem_x509_certificate(broker.cert.encode())
    cert.verify_directly_issued_by(x509.load_pem_x509_certificate(ca.cert.encode()))
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    for name in (
        "orders",
        "orders.shop.svc",
        "orders-cm-headless.shop.svc",
        "orders-cm-0.orders-cm-headless.shop.svc",
    ):
        assert any(_matches(pattern, name) for pattern in sans.get_values_for_type(x509.DNSName)), name
    assert "127.0.0.1" in {str(i) for i in sans.get_values_for_type(x509.IPAddress)}
    # And the standard library accepts it as a server certificate for that CA.
    (tmp_path / "ca.crt").write_text(ca.cert)
    (tmp_path / "tls.crt").write_text(broker.cert)
    (tmp_path / "tls.key").write_text(broker.key)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    client = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    c = client.wrap_bio(c_in, c_out, server_hostname="orders.shop.svc")
    srv = server.wrap_bio(s_in, s_out, server_side=True)
    for _ in range(10):
        for side, out, into in ((c, c_out, s_in), (srv, s_out, c_in)):
            try:
                side.do_handshake()
            except ssl.SSLWantReadError:
                pass
            into.write(out.read())
    assert c.version() is not None and srv.version() is not None


def _matches(pattern: str, name: str) -> bool:
    if pattern.startswith("*."):
        head, _, rest = name.partition(".")
        return bool(head) and rest == pattern[2:]
    return pattern == name


def test_long_cluster_and_namespace_names_still_get_a_ca_and_a_certificate() -> None:
    # A 49-character cluster name in a 63-character namespace: the common names would pass the
    # 64 characters X.509 allows.
    s = dataclasses.replace(settings(), name="c" * 49, namespace="n" * 63)
    ca = pki.new_ca(f"hybridmq {s.name} CA {s.namespace}")
    cert = pki.issue(ca, f"{s.name} brokers in {s.namespace}", dns_names=broker_dns_names(s)[:3])
    x509.load_pem_x509_certificate(cert.cert.encode()).verify_directly_issued_by(
        x509.load_pem_x509_certificate(ca.cert.encode())
    )
