"""How a client reaches a CM: plain TCP, or TLS with the CM's certificate verified (the ``ssl=`` and
``server_hostname=`` options of ``Producer.connect``/``Consumer.connect``, env ``HYBRIDMQ_TLS_CA`` and
``HYBRIDMQ_TLS_SERVER_NAME`` when they are not given)."""

from __future__ import annotations

import os
import ssl as _ssl
from dataclasses import dataclass
from typing import Any

from hybridmq.protocol import Connection, open_connection
from hybridmq.protocol.tls import SslOption, client_context

TLS_CA_ENV = "HYBRIDMQ_TLS_CA"
TLS_SERVER_NAME_ENV = "HYBRIDMQ_TLS_SERVER_NAME"


@dataclass(frozen=True)
class Transport:
    """How to reach a CM: plain TCP (``ssl`` None) or TLS checking ``server_hostname``."""

    ssl: _ssl.SSLContext | None = None
    server_hostname: str | None = None

    @classmethod
    def of(cls, ssl: SslOption | Transport = None, server_hostname: str | None = None) -> Transport:
        if isinstance(ssl, Transport):
            return ssl
        if ssl is None:
            ssl = os.environ.get(TLS_CA_ENV) or None
        name = server_hostname or os.environ.get(TLS_SERVER_NAME_ENV) or None
        return cls(client_context(ssl), name)

    async def open(
        self, host: str, port: int, hello: dict[str, Any], name: str
    ) -> tuple[Connection, dict[str, Any]]:
        return await open_connection(
            host, port, hello, name=name, ssl=self.ssl, server_hostname=self.server_hostname
        )
