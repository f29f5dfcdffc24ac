"""The cluster CA at work: create it once, issue and renew the brokers' certificate into the Secrets
the pods mount (``resources/tls.py`` builds them and decides when a certificate is due).

Run before the StatefulSets are applied (a pod needs its Secret to start) and again by the
children's one-minute resync, which is what renews a certificate ``RENEW_BEFORE`` its expiry: the
new one is written to ``<c>-broker-tls``, the kubelet updates the mounted files and every broker
takes it up on its next handshakes, without a restart and without dropping a connection.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from hybridmq import pki
from hybridmq_operator import kube, names
from hybridmq_operator.resources import tls as tls_resources
from hybridmq_operator.settings import ClusterSettings

log = logging.getLogger(__name__)


def cluster_ca(settings: ClusterSettings) -> tuple[pki.Issued, str]:
    """The cluster's CA and its revocation list, made on first use."""
    name = names.ca_secret_name(settings.name)
    data = tls_resources.decode(kube.get("v1", "Secret", settings.namespace, name))
    if not {"ca.crt", "ca.key", "ca.crl"} <= data.keys():
        ca = pki.new_ca(
            f"hybridmq {settings.namespace}/{settings.name} cluster CA", days=tls_resources.CA_DAYS
        )
        crl = pki.revocation_list(ca)
        try:
            kube.create(tls_resources.build_ca_secret(settings, ca.cert, ca.key, crl))
            log.info("created the cluster CA of %s/%s", settings.namespace, settings.name)
            return ca, crl
        except kube.KubeError as exc:
            if not exc.conflict:
                raise
            # Another operator replica was first: use its CA.
            data = tls_resources.decode(kube.get("v1", "Secret", settings.namespace, name))
    return pki.Issued(data["ca.crt"], data["ca.key"]), data["ca.crl"]


def ensure_tls(settings: ClusterSettings, now: dt.datetime | None = None) -> str | None:
    """Make sure the brokers' Secret holds a valid certificate of the cluster CA; returns why one
    was issued (None when nothing changed, TLS is off, or the user's own Secret is used)."""
    if not tls_resources.operator_issues(settings):
        return None
    ca, crl = cluster_ca(settings)
    secret_name = names.broker_tls_secret_name(settings.name)
    current = tls_resources.decode(kube.get("v1", "Secret", settings.namespace, secret_name))
    info: pki.CertInfo | None = None
    if "tls.crt" in current:
        try:
            info = pki.describe(current["tls.crt"])
        except ValueError:
            info = None
    now = now or dt.datetime.now(dt.UTC)
    reason = tls_resources.broker_cert_due(info, pki.key_id(ca.cert), settings, now)
    if reason is None and current.get("ca.crl") == crl and current.get("ca.crt") == ca.cert:
        kube.apply(tls_resources.build_ca_cert_secret(settings, ca.cert))
        return None
    files: dict[str, Any] = dict(current)
    if reason is not None:
        broker = pki.issue(
            ca,
            f"{settings.name} brokers",
            dns_names=tls_resources.broker_dns_names(settings),
            ip_addresses=tls_resources.PORT_FORWARD_IPS,
            days=tls_resources.CERT_DAYS,
        )
        files = {"tls.crt": broker.cert, "tls.key": broker.key}
        log.info("issued the brokers' certificate of %s/%s: %s", settings.namespace, settings.name, reason)
    kube.apply(
        tls_resources.build_broker_tls_secret(settings, files["tls.crt"], files["tls.key"], ca.cert, crl)
    )
    kube.apply(tls_resources.build_ca_cert_secret(settings, ca.cert))
    return reason
