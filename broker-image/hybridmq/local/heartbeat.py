"""The MM's heartbeat to the local controller: broker-only mode's equivalent of renewing a Lease.

Every ``interval_s`` the MM posts its name, a per-process incarnation id and its report (an
``MMReport``: the same figures as the Lease annotation in Kubernetes). The lease is *valid* while
``start of the last successful heartbeat + lease_s`` has not passed on the MM's monotonic clock (so
it ends no later than the controller's view of it) **and** the MM has applied the assignment
version the controller named in its reply (a primary that was frozen, e.g. SIGSTOP, learns of the
newer epoch before it may write again). ``trigger()`` sends one at once (an in-sync change).
Each heartbeat presents the cluster secret. It is the MM's ``Liveness`` (``broker/mm/liveness.py``)
under the local controller; ``start(holder)`` gives it the report to carry.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

import aiohttp

from hybridmq.broker.auth import cluster_secret
from hybridmq.broker.mm.liveness import LeaseHolder
from hybridmq.local.source import ControllerSource

LOG = logging.getLogger(__name__)


def _no_report() -> dict[str, Any]:
    return {}


class Heartbeat:
    commits_in_sync = True  # the controller commits the in-sync changes this MM reports

    def __init__(
        self,
        url: str,
        secret: str,
        name: str,
        source: ControllerSource | None = None,
        *,
        interval_s: float = 0.2,
        lease_s: float = 1.0,
    ) -> None:
        self.url = url.rstrip("/")
        self.headers = cluster_secret.bearer(secret)
        self.name = name
        self.report: Callable[[], dict[str, Any]] = _no_report
        self.source = source
        self.interval_s = interval_s
        self.lease_s = lease_s
        self.incarnation = uuid.uuid4().hex
        self.deadline = float("-inf")
        self.required_version = 0
        self.sent = 0
        self.failures = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._session: aiohttp.ClientSession | None = None

    def valid(self) -> bool:
        if time.monotonic() >= self.deadline:
            return False
        return self.source is None or self.source.version >= self.required_version

    def catching_up(self) -> bool:
        """Valid but for a table version not applied yet (it normally arrives within ms)."""
        return (
            time.monotonic() < self.deadline
            and self.source is not None
            and self.source.version < self.required_version
        )

    def remaining_s(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def trigger(self) -> None:
        self._wake.set()

    def stats(self) -> dict[str, Any]:
        return {
            "valid": self.valid(),
            "remaining_s": round(self.remaining_s(), 3),
            "sent": self.sent,
            "failures": self.failures,
        }

    async def start(self, holder: LeaseHolder) -> None:
        self.report = holder.report
        self._session = aiohttp.ClientSession()
        await self.beat()
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        if self._session is not None:
            await self._session.close()

    async def beat(self) -> bool:
        assert self._session is not None
        started = time.monotonic()
        body = {"name": self.name, "incarnation": self.incarnation, "report": self.report()}
        try:
            timeout = aiohttp.ClientTimeout(total=max(self.lease_s / 2, 0.2))
            async with self._session.post(
                f"{self.url}/heartbeat", json=body, timeout=timeout, headers=self.headers
            ) as resp:
                resp.raise_for_status()
                reply = await resp.json()
        except Exception as exc:
            self.failures += 1
            LOG.debug("heartbeat failed: %s", exc)
            return False
        self.sent += 1
        self.lease_s = float(reply.get("lease_s", self.lease_s))
        self.required_version = max(self.required_version, int(reply.get("version", 0)))
        self.deadline = max(self.deadline, started + self.lease_s)
        return True

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            try:
                async with asyncio.timeout(self.interval_s):
                    await self._wake.wait()
            except TimeoutError:
                pass
            await self.beat()
