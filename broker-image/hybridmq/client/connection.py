"""Connecting a client to a CM: bootstrap list, failover to the next CM, handshake errors.

Without a ``strategy`` the bootstrap addresses are tried in order. With one (``distribution.
RoundRobin(directory_fetcher(bootstrap))`` or ``Centralized``) the CM is chosen by it and
``connect_with_failover`` moves on to the next CM until one accepts. Authentication errors are not
connection failures: they are raised at once, except ``AUTH_BUSY`` (the CM has too many password
checks waiting): the next CM is tried, and ``AUTH_BUSY`` is raised only when every one was busy.

TLS: ``ssl=`` as aiokafka and nats.py take it (an ``ssl.SSLContext``, a CA file, or ``True`` for the
system's CAs; env ``HYBRIDMQ_TLS_CA`` when not given). The CM's certificate is verified, host name
included; ``server_hostname`` (env ``HYBRIDMQ_TLS_SERVER_NAME``) is the name to check when the
address is an IP the certificate does not carry (a CM pod's IP from the broker table).

A CM on TLS closes a plain-TCP HELLO without a word: when a plain connection ends during the
handshake, the client tries a TLS handshake there (nothing verified, nothing sent), and if the CM
speaks TLS the failure is ``TlsRequired``. A certificate the given CA does not verify is
``TlsVerifyFailed``. Both are ``ConnectionError``s.
"""

from __future__ import annotations

import asyncio
import os
import ssl as _ssl
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from hybridmq.api.assignment import BrokerEntry
from hybridmq.api.frames import PROTOCOL_VERSION, ErrorCode, FrameType
from hybridmq.client.distribution import NoBrokerAvailable, Strategy, connect_with_failover
from hybridmq.client.transport import TLS_CA_ENV, Transport
from hybridmq.protocol import Connection, RemoteError
from hybridmq.protocol.codec import ProtocolError
from hybridmq.protocol.connection import ConnectionClosed
from hybridmq.protocol.tls import SslOption

TLS_PROBE_TIMEOUT_S = 3.0


class ClientError(Exception):
    """A request was refused; ``code`` is an ``ErrorCode``."""

    def __init__(self, code: int, msg: str) -> None:
        name = ErrorCode(code).name if code in ErrorCode._value2member_map_ else str(code)
        super().__init__(f"{name}: {msg}")
        self.code = code
        self.msg = msg


class _Busy(ConnectionError):
    """A CM answered AUTH_BUSY: a connection failure for the distribution (try the next CM)."""

    def __init__(self, error: ClientError) -> None:
        super().__init__(str(error))
        self.error = error


class TlsRequired(ConnectionError):
    """The CM at ``address`` speaks TLS and this client connected in plain TCP (no CA given)."""

    def __init__(self, address: str) -> None:
        super().__init__(
            f"the CM at {address} speaks TLS and this client connected in plain TCP: give the CA that "
            f"signed its certificate (ssl=, env {TLS_CA_ENV})"
        )
        self.address = address


class TlsVerifyFailed(ConnectionError):
    """The CM's certificate was not verified with the CA given (or its name did not match)."""

    def __init__(self, address: str, reason: str, detail: str = "") -> None:
        super().__init__(
            f"the CM at {address} presented a certificate that was not verified: {detail or reason}"
        )
        self.address = address
        self.reason = reason  # OpenSSL's verify message, e.g. "self-signed certificate in certificate chain"


async def speaks_tls(host: str, port: int, timeout: float = TLS_PROBE_TIMEOUT_S) -> bool:  # noqa: ASYNC109
    """Whether ``host:port`` answers a TLS handshake (its certificate not checked, nothing sent)."""
    ctx = _ssl.SSLContext(_ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = _ssl.CERT_NONE
    try:
        async with asyncio.timeout(timeout):
            _, writer = await asyncio.open_connection(host, port, ssl=ctx, server_hostname=host)
    except _ssl.SSLError as exc:  # a TLS alert (e.g. a client certificate required) is TLS too
        return "ALERT" in str(exc.reason or "").upper()
    except (OSError, TimeoutError, EOFError):
        return False
    writer.close()
    try:
        async with asyncio.timeout(1.0):
            await writer.wait_closed()
    except (OSError, TimeoutError, _ssl.SSLError):
        pass
    return True


def _verify_reason(exc: BaseException) -> str | None:
    """The reason of a certificate verification failure (None if ``exc`` is not one)."""
    if isinstance(exc, _ssl.SSLCertVerificationError):
        return str(getattr(exc, "verify_message", None) or exc.reason or exc)
    return None


async def _plain_failure(transport: Transport, host: str, port: int, exc: BaseException) -> BaseException:
    """``exc`` (a failed handshake with ``host:port``) as TlsRequired or TlsVerifyFailed when it is one."""
    address = f"{host}:{port}"
    reason = _verify_reason(exc)
    if reason is not None:
        return TlsVerifyFailed(address, reason, str(exc))
    closed = isinstance(exc, (ConnectionClosed, ProtocolError, ConnectionResetError))
    if transport.ssl is None and closed and await speaks_tls(host, port):
        return TlsRequired(address)
    return exc


def _failure_reason(exc: BaseException, timeout: float) -> str:
    """What a failed handshake says to a user: a timeout's own text is empty."""
    if isinstance(exc, TimeoutError):
        return f"no handshake within {timeout:g} s"
    return str(exc) or type(exc).__name__


def _refusal(exc: RemoteError) -> ClientError | _Busy:
    error = ClientError(exc.code, exc.msg)
    return _Busy(error) if exc.code == ErrorCode.AUTH_BUSY else error


def parse_bootstrap(bootstrap: str | list[str]) -> list[tuple[str, int]]:
    items = bootstrap.split(",") if isinstance(bootstrap, str) else bootstrap
    out = []
    for item in items:
        host, _, port = item.strip().rpartition(":")
        out.append((host or "127.0.0.1", int(port)))
    return out


async def connect(
    bootstrap: str | list[str] | None = None,
    *,
    user: str | None = None,
    password: str | None = None,
    client_id: str | None = None,
    app: str | None = None,
    timeout: float = 10.0,  # noqa: ASYNC109
    strategy: Strategy | None = None,
    ssl: SslOption | Transport = None,
    server_hostname: str | None = None,
) -> tuple[Connection, dict[str, Any]]:
    """Connect to the first CM that answers (env ``HYBRIDMQ_BOOTSTRAP``, ``HYBRIDMQ_USER``,
    ``HYBRIDMQ_PASSWORD`` fill in what is not given). Authentication errors are raised at once."""
    transport = Transport.of(ssl, server_hostname)
    bootstrap = bootstrap or os.environ.get("HYBRIDMQ_BOOTSTRAP", "127.0.0.1:7000")
    user = user if user is not None else os.environ.get("HYBRIDMQ_USER")
    password = password if password is not None else os.environ.get("HYBRIDMQ_PASSWORD")
    hello = {
        "t": FrameType.HELLO,
        "v": PROTOCOL_VERSION,
        "id": client_id or f"client-{uuid.uuid4().hex[:8]}",
        "user": user,
        "password": password,
        "role": "client",
        "app": app or os.environ.get("HYBRIDMQ_APP"),
    }
    if strategy is None and os.environ.get("HYBRIDMQ_DISTRIBUTION"):
        from hybridmq.client.directory import configured_strategy  # distribution by env

        strategy = configured_strategy(
            bootstrap, app=str(hello["app"] or ""), user=user, password=password, ssl=transport
        )
    if strategy is not None:

        async def attempt(address: str) -> tuple[Connection, dict[str, Any]]:
            host, port = parse_bootstrap(address)[0]
            try:
                async with asyncio.timeout(timeout):
                    return await transport.open(host, port, dict(hello), "client")
            except RemoteError as exc:
                raise _refusal(exc) from None
            except (ConnectionClosed, ProtocolError, _ssl.SSLError) as exc:
                # gone during the handshake (or not a CM we can talk to): the next CM
                why = await _plain_failure(transport, host, port, exc)
                raise (
                    why if isinstance(why, ConnectionError) else ConnectionError(f"{address}: {exc}")
                ) from None

        try:
            _, result = await connect_with_failover(strategy, attempt)
        except NoBrokerAvailable as exc:
            if exc.attempts and all(ErrorCode.AUTH_BUSY.name in why for _, why in exc.attempts):
                raise ClientError(ErrorCode.AUTH_BUSY, f"every CM was busy: {exc}") from None
            raise
        return result
    last_reason = "no address"
    tls: TlsRequired | TlsVerifyFailed | None = None
    busy: ClientError | None = None
    for host, port in parse_bootstrap(bootstrap):
        try:
            async with asyncio.timeout(timeout):
                return await transport.open(host, port, dict(hello), "client")
        except RemoteError as exc:
            refusal = _refusal(exc)
            if not isinstance(refusal, _Busy):
                raise refusal from None
            busy = refusal.error
        except (
            OSError,
            TimeoutError,
            asyncio.IncompleteReadError,
            ConnectionError,
            ConnectionClosed,
            ProtocolError,
        ) as exc:
            failure = await _plain_failure(transport, host, port, exc)  # unreachable, gone: the next CM
            last_reason = f"{host}:{port}: {_failure_reason(failure, timeout)}"
            if isinstance(failure, (TlsRequired, TlsVerifyFailed)):
                tls = tls or failure
    if busy is not None:
        raise busy  # the others were unreachable: the retriable refusal says more
    if tls is not None:
        raise tls  # what to change on this side, rather than the last CM's error
    raise ConnectionError(f"no CM reachable in {bootstrap}: {last_reason}")


def directory_fetcher(
    bootstrap: str | list[str],
    *,
    user: str | None = None,
    password: str | None = None,
    ssl: SslOption | Transport = None,
) -> Callable[[], Awaitable[list[BrokerEntry]]]:
    """A broker-table fetcher (DIRECTORY frame) for ``distribution.RoundRobin``."""

    async def fetch() -> list[BrokerEntry]:
        conn, _ = await connect(bootstrap, user=user, password=password, ssl=ssl)
        runner = asyncio.create_task(conn.run())
        try:
            reply = await conn.request({"t": FrameType.DIRECTORY}, timeout=5)
            return [BrokerEntry.model_validate(b) for b in reply["brokers"]]
        finally:
            conn.close()
            runner.cancel()

    return fetch


def raise_remote(exc: BaseException) -> BaseException:
    if isinstance(exc, RemoteError):
        return ClientError(exc.code, exc.msg)
    return exc
