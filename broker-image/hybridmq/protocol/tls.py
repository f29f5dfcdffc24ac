"""TLS on every listener and link: server contexts that pick up rotated certificates, client contexts.

A broker's certificates are files in one directory, named as in a Kubernetes TLS Secret (and as
cert-manager writes them): ``tls.crt`` (the broker's chain), ``tls.key``, ``ca.crt`` (the CA that
signs the brokers: peers must present a certificate it signed) and, optionally, ``ca.crl`` (that
CA's revocation list; when present, a revoked peer certificate is refused).

Rotation without dropping connections: a listener's context has an SNI callback (called on every
handshake, with or without a server name) that swaps in a context built from the files as they are
now, re-read when they changed (checked at most once per ``RECHECK_S``). Established connections
keep their session; new handshakes get the new certificate. Files caught half-written (a key that
does not match the certificate) keep the previous context until the next check.

Brokers reach each other by pod IP, known only after their certificates were issued, so links
between brokers check the chain up to the cluster CA (which signs nothing but this cluster's
brokers) and not the host name. Clients check both, by default (``client_context``).
"""

from __future__ import annotations

import logging
import os
import ssl
import time
from pathlib import Path

log = logging.getLogger(__name__)

CERT, KEY, CA, CRL = "tls.crt", "tls.key", "ca.crt", "ca.crl"
RECHECK_S = 1.0

SslOption = ssl.SSLContext | str | bool | None
"""What a client accepts as ``ssl=`` (as aiokafka and nats.py): a context, a CA file, ``True`` for
the system's CAs, ``None``/``False`` for plain TCP."""


def client_context(option: SslOption) -> ssl.SSLContext | None:
    """The client-side context of ``option`` (see ``SslOption``); server certificates are verified,
    host name included, unless the caller's own context says otherwise."""
    if option is None or option is False:
        return None
    if isinstance(option, ssl.SSLContext):
        return option
    if option is True:
        return ssl.create_default_context()
    if not Path(option).is_file():
        raise FileNotFoundError(f"TLS CA file {option!r} does not exist")
    return ssl.create_default_context(cafile=option)


class TlsConfigError(Exception):
    """The certificate directory is missing a file or holds unusable certificates."""


def _fingerprint(directory: Path) -> tuple[tuple[int, int, int] | None, ...]:
    out: list[tuple[int, int, int] | None] = []
    for name in (CERT, KEY, CA, CRL):
        try:
            st = os.stat(directory / name)  # follows the Secret volume's ..data symlinks
            out.append((st.st_ino, st.st_mtime_ns, st.st_size))
        except FileNotFoundError:
            out.append(None)
    return tuple(out)


class BrokerTls:
    """One broker's TLS material (a directory, see the module doc) and the contexts made from it."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        for name in (CERT, KEY, CA):
            if not (self.directory / name).is_file():
                raise TlsConfigError(f"{self.directory / name} is missing")
        self._seen = _fingerprint(self.directory)
        self._checked = time.monotonic()
        self._server = {True: self._build_server(True), False: self._build_server(False)}
        self._client = self._build_client()
        self.reloads = 0  # how many times new files were taken up (stats)

    # -- building --------------------------------------------------------------------------------
    def _trust(self, ctx: ssl.SSLContext) -> None:
        ctx.load_verify_locations(cafile=str(self.directory / CA))
        crl = self.directory / CRL
        if crl.is_file():
            ctx.load_verify_locations(cafile=str(crl))  # PEM CRLs load like certificates
            ctx.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF

    def _context(self, protocol: ssl._SSLMethod) -> ssl.SSLContext:
        ctx = ssl.SSLContext(protocol)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            ctx.load_cert_chain(str(self.directory / CERT), str(self.directory / KEY))
            self._trust(ctx)
        except (OSError, ssl.SSLError) as exc:
            raise TlsConfigError(f"{self.directory}: {exc}") from exc
        return ctx

    def _build_server(self, peer_cert: bool) -> ssl.SSLContext:
        ctx = self._context(ssl.PROTOCOL_TLS_SERVER)
        ctx.verify_mode = ssl.CERT_REQUIRED if peer_cert else ssl.CERT_NONE
        return ctx

    def _build_client(self) -> ssl.SSLContext:
        ctx = self._context(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False  # peers by pod IP: the chain to the cluster CA is what counts
        ctx.verify_mode = ssl.CERT_REQUIRED
        return ctx

    def _refresh(self) -> None:
        now = time.monotonic()
        if now - self._checked < RECHECK_S:
            return
        self._checked = now
        seen = _fingerprint(self.directory)
        if seen == self._seen:
            return
        try:
            server = {True: self._build_server(True), False: self._build_server(False)}
            client = self._build_client()
        except TlsConfigError as exc:
            log.warning("new TLS files not taken up yet (kept the previous ones): %s", exc)
            return
        self._seen, self._server, self._client = seen, server, client
        self.reloads += 1
        log.info("TLS certificates reloaded from %s", self.directory)

    # -- contexts --------------------------------------------------------------------------------
    def server(self, *, peer_cert: bool) -> ssl.SSLContext:
        """A listener's context: ``peer_cert`` requires a certificate signed by the CA (broker-only
        listeners). Each handshake uses the files as they are now (the SNI callback)."""
        listener = self._build_server(peer_cert)

        def current(obj: ssl.SSLObject | ssl.SSLSocket, _name: str | None, _ctx: ssl.SSLContext) -> None:
            self._refresh()
            obj.context = self._server[peer_cert]

        listener.sni_callback = current
        return listener

    def client(self) -> ssl.SSLContext:
        """A link to another broker: presents this broker's certificate, verifies the peer's."""
        self._refresh()
        return self._client
