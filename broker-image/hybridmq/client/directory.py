"""Talking to the directory and choosing the distribution strategy by configuration.

``DirectoryClient`` asks any live CM (the bootstrap list first, then the CMs of the last broker table
it saw, so it keeps working when the bootstrap CM is gone) for the broker table or, for centralized
distribution, for the next CM of an application. Its look-up connections say ``app = "_directory"``,
which the directory does not count.

``make_strategy(bootstrap, distribution, app)`` builds the strategy ``connect`` uses:

* ``"round-robin"`` (alias ``"decentralized"``): :class:`~hybridmq.client.distribution.RoundRobin`
  over the cached broker table, refreshed every ``HYBRIDMQ_DIRECTORY_REFRESH_S`` seconds (default 30)
  and after every failed attempt;
* ``"centralized"``: :class:`~hybridmq.client.distribution.Centralized`, asking the directory;
* ``"bootstrap"`` / unset: ``None`` (the bootstrap addresses in order).

The environment variable ``HYBRIDMQ_DISTRIBUTION`` supplies the choice when no option is given.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from typing import Any

from hybridmq.api.assignment import BrokerEntry
from hybridmq.api.frames import PROTOCOL_VERSION, FrameType
from hybridmq.client.distribution import Centralized, RoundRobin, Strategy
from hybridmq.client.transport import Transport
from hybridmq.protocol import RemoteError
from hybridmq.protocol.tls import SslOption

DISTRIBUTION_ENV = "HYBRIDMQ_DISTRIBUTION"
REFRESH_ENV = "HYBRIDMQ_DIRECTORY_REFRESH_S"
LOOKUP_APP = "_directory"
MODES = {"round-robin": "round-robin", "decentralized": "round-robin", "centralized": "centralized"}


def split_addresses(bootstrap: str | list[str] | None) -> list[str]:
    items = bootstrap.split(",") if isinstance(bootstrap, str) else list(bootstrap or [])
    return [i.strip() for i in items if i.strip()]


class DirectoryClient:
    def __init__(
        self,
        bootstrap: str | list[str] | None,
        *,
        user: str | None = None,
        password: str | None = None,
        timeout_s: float = 1.0,
        ssl: SslOption | Transport = None,
    ) -> None:
        self.transport = Transport.of(ssl)
        self.seeds = split_addresses(bootstrap or os.environ.get("HYBRIDMQ_BOOTSTRAP", "127.0.0.1:7000"))
        self.user = user if user is not None else os.environ.get("HYBRIDMQ_USER")
        self.password = password if password is not None else os.environ.get("HYBRIDMQ_PASSWORD")
        self.timeout_s = timeout_s
        self.known: list[str] = []  # ready CMs of the last broker table
        self._last_good: str | None = None
        self._failed_at: dict[str, float] = {}  # address -> when it last failed to answer

    def _candidates(self) -> list[str]:
        order = list(dict.fromkeys(([self._last_good] if self._last_good else []) + self.seeds + self.known))
        # Addresses that failed lately go last (a hung CM costs a whole timeout per look-up).
        recent = time.monotonic() - 10.0
        return sorted(order, key=lambda a: self._failed_at.get(a, float("-inf")) > recent)

    async def request(self, frame: dict[str, Any]) -> dict[str, Any]:
        """Send one DIRECTORY request to the first CM that answers."""
        errors: list[str] = []
        for address in self._candidates():
            host, _, port = address.rpartition(":")
            hello = {
                "t": FrameType.HELLO,
                "v": PROTOCOL_VERSION,
                "id": "directory-lookup",
                "user": self.user,
                "password": self.password,
                "role": "client",
                "app": LOOKUP_APP,
            }
            try:
                async with asyncio.timeout(self.timeout_s):
                    conn, _ = await self.transport.open(host or "127.0.0.1", int(port), hello, "directory")
            except RemoteError as exc:
                from hybridmq.client.connection import ClientError

                raise ClientError(exc.code, exc.msg) from None
            except (OSError, TimeoutError, ConnectionError, asyncio.IncompleteReadError) as exc:
                errors.append(f"{address}: {exc}")
                self._failed_at[address] = time.monotonic()
                continue
            runner = asyncio.create_task(conn.run())
            try:
                reply: dict[str, Any] = await conn.request(dict(frame), timeout=self.timeout_s)
            except RemoteError as exc:
                from hybridmq.client.connection import ClientError

                raise ClientError(exc.code, exc.msg) from None
            except (TimeoutError, ConnectionError) as exc:
                errors.append(f"{address}: {exc}")
                self._failed_at[address] = time.monotonic()
                continue
            finally:
                conn.close()
                runner.cancel()
            self._last_good = address
            self.known = [
                b["address"] for b in reply.get("brokers", []) if b.get("role") == "cm" and b.get("ready")
            ]
            return reply
        raise ConnectionError(f"no directory reachable: {'; '.join(errors) or 'no address'}")

    async def broker_table(self) -> list[BrokerEntry]:
        reply = await self.request({"t": FrameType.DIRECTORY})
        return [BrokerEntry.model_validate(b) for b in reply["brokers"]]

    async def next_cm(self, app: str) -> str:
        reply = await self.request({"t": FrameType.DIRECTORY, "next": app})
        return str(reply["next"]["address"])

    async def applications(self) -> dict[str, dict[str, int]]:
        reply = await self.request({"t": FrameType.DIRECTORY})
        return {str(cm): dict(apps) for cm, apps in reply.get("applications", {}).items()}


def make_strategy(
    bootstrap: str | list[str] | None,
    distribution: str | None = None,
    *,
    app: str | None = None,
    user: str | None = None,
    password: str | None = None,
    refresh_interval_s: float | None = None,
    ssl: SslOption | Transport = None,
) -> Strategy | None:
    """The configured distribution strategy (option, else ``HYBRIDMQ_DISTRIBUTION``), or None."""
    mode = (distribution or os.environ.get(DISTRIBUTION_ENV) or "bootstrap").lower()
    if mode == "bootstrap":
        return None
    if mode not in MODES:
        raise ValueError(f"unknown distribution {mode!r}: use bootstrap, round-robin or centralized")
    directory = DirectoryClient(bootstrap, user=user, password=password, ssl=ssl)
    interval = refresh_interval_s or float(os.environ.get(REFRESH_ENV) or 30.0)
    rr = RoundRobin(directory.broker_table, seeds=directory.seeds, refresh_interval_s=interval)
    rr._position = random.randrange(1024)  # independent clients must not all start on the same CM
    if MODES[mode] == "round-robin":
        return rr
    application = app or os.environ.get("HYBRIDMQ_APP") or user or "anonymous"
    return Centralized(lambda: directory.next_cm(application), rr)


_configured: dict[tuple[str, ...], Strategy | None] = {}


def configured_strategy(
    bootstrap: str | list[str] | None,
    *,
    app: str | None = None,
    user: str | None = None,
    password: str | None = None,
    ssl: SslOption | Transport = None,
) -> Strategy | None:
    """The ``HYBRIDMQ_DISTRIBUTION`` strategy, one per (bootstrap, mode, app, user) in this process,
    so that successive ``connect`` calls go round-robin over one cached table."""
    mode = os.environ.get(DISTRIBUTION_ENV) or "bootstrap"
    key = (",".join(split_addresses(bootstrap)), mode, app or "", user or "")
    if key not in _configured:
        _configured[key] = make_strategy(bootstrap, mode, app=app, user=user, password=password, ssl=ssl)
    return _configured[key]
