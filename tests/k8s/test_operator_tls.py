"""The operator's cluster CA on the real API server: the Secrets it makes, the certificate the
broker pods serve (stand-in brokers, HTTPS like the real ones), and a renewal the pods take up.

Checked with the standard library's ``ssl`` and ``cryptography``'s verification, against the CA
certificate read from the Secret meant for clients."""

from __future__ import annotations

import base64
import socket
import ssl
import time
from pathlib import Path

import pytest
from cryptography import x509
from operator_harness import Kube, module_fixtures, wait_for

from hybridmq import pki

pytestmark = pytest.mark.cluster

NAME = "tlsc"
namespace, kube, operator, cluster = module_fixtures("tls", NAME, 1, 1, 1)


def secret(kube: Kube, name: str) -> dict[str, str]:
    s = kube.core.read_namespaced_secret(name, kube.namespace)
    return {k: base64.b64decode(v).decode() for k, v in (s.data or {}).items()}


def served(ip: str, port: int, ca_file: Path, server_name: str) -> x509.Certificate:
    """The certificate a broker pod serves, verified as a client does (chain and name)."""
    ctx = ssl.create_default_context(cafile=str(ca_file))
    with (
        socket.create_connection((ip, port), timeout=5) as raw,
        ctx.wrap_socket(raw, server_hostname=server_name) as sock,
    ):
        der = sock.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def test_the_operator_runs_a_cluster_ca(kube: Kube, cluster: str, namespace: str, tmp_path: Path) -> None:
    ca = secret(kube, f"{cluster}-cluster-ca")
    assert {"ca.crt", "ca.key", "ca.crl"} <= ca.keys()
    public = secret(kube, f"{cluster}-cluster-ca-cert")
    assert public == {"ca.crt": ca["ca.crt"]}  # clients get the certificate, never the key
    broker = kube.core.read_namespaced_secret(f"{cluster}-broker-tls", namespace)
    assert broker.type == "kubernetes.io/tls"
    files = secret(kube, f"{cluster}-broker-tls")
    ca_cert = x509.load_pem_x509_certificate(ca["ca.crt"].encode())
    x509.load_pem_x509_certificate(files["tls.crt"].encode()).verify_directly_issued_by(ca_cert)
    assert files["ca.crt"] == ca["ca.crt"]

    # Every broker pod serves it (its HTTP side: HTTPS), for the client Service's name.
    (tmp_path / "ca.crt").write_text(public["ca.crt"])
    for pod in kube.pods():
        cert = served(pod.status.pod_ip, 8080, tmp_path / "ca.crt", f"{cluster}.{namespace}.svc")
        assert cert.serial_number == pki.serial_of(files["tls.crt"])
    # Another name than the cluster's is refused by the same check.
    pod_ip = kube.pods()[0].status.pod_ip
    with pytest.raises(ssl.SSLCertVerificationError):
        served(pod_ip, 8080, tmp_path / "ca.crt", "somebody-else.example.com")


def test_a_wrong_certificate_is_replaced_and_taken_up_by_the_pods(
    kube: Kube, cluster: str, namespace: str, tmp_path: Path
) -> None:
    name = f"{cluster}-broker-tls"
    rogue = pki.issue(pki.new_ca("rogue"), "rogue", dns_names=["localhost"])
    kube.core.patch_namespaced_secret(
        name,
        namespace,
        {
            "data": {
                k: base64.b64encode(v.encode()).decode()
                for k, v in (("tls.crt", rogue.cert), ("tls.key", rogue.key))
            }
        },
    )
    kube.patch_cluster(cluster, {"metadata": {"annotations": {"test/touch": str(time.time())}}})
    ca_pem = secret(kube, f"{cluster}-cluster-ca")["ca.crt"]
    ca_cert = x509.load_pem_x509_certificate(ca_pem.encode())

    def reissued() -> int | None:
        crt = secret(kube, name)["tls.crt"]
        if crt == rogue.cert:
            return None
        x509.load_pem_x509_certificate(crt.encode()).verify_directly_issued_by(ca_cert)
        return pki.serial_of(crt)

    serial = wait_for(reissued, 30, "the operator reissues the brokers' certificate")
    assert "CertificateIssued" in kube.event_reasons("BrokerCluster")
    # The pods' Secret volume is refreshed (a minute at most here, as the kubelet's sync period)
    # and the brokers take the new files up on their next handshake, without a restart.
    (tmp_path / "ca.crt").write_text(ca_pem)
    pod = kube.pods("cm")[0]
    restarts = sum(c.restart_count for c in pod.status.container_statuses or [])

    def serves_new() -> bool:
        try:
            cert = served(pod.status.pod_ip, 8080, tmp_path / "ca.crt", f"{cluster}.{namespace}.svc")
        except ssl.SSLError:  # the rogue files, if the volume was refreshed between the two writes
            return False
        return bool(cert.serial_number == serial)

    wait_for(serves_new, 150, "the pod serves the reissued certificate")
    pod = kube.core.read_namespaced_pod(pod.metadata.name, namespace)
    assert sum(c.restart_count for c in pod.status.container_statuses or []) == restarts
