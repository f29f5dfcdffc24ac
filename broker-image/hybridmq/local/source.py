"""``ControllerSource``: an ``AssignmentSource`` that long-polls the local controller's table.

``GET /assignments?after=<version>&wait=10`` answers as soon as the controller has a newer table, so
a failover reaches every MM and CM within one round trip. ``version`` is the table version applied;
``wait_version(v)`` waits until it is at least ``v`` (the heartbeat uses it for lease validity).
Every poll presents the cluster secret (the controller refuses anyone else).
"""

from __future__ import annotations

import asyncio
import logging

import aiohttp

from hybridmq.api.assignment import BrokerEntry, PartitionAssignment
from hybridmq.broker.assignment_source import StaticAssignmentSource
from hybridmq.broker.auth import cluster_secret

LOG = logging.getLogger(__name__)


class ControllerSource(StaticAssignmentSource):
    def __init__(self, url: str, secret: str, *, poll_wait_s: float = 10.0) -> None:
        super().__init__()
        self.url = url.rstrip("/")
        self.headers = cluster_secret.bearer(secret)
        self.poll_wait_s = poll_wait_s
        self.version = 0
        self._session: aiohttp.ClientSession | None = None
        self._task: asyncio.Task[None] | None = None
        self._applied = asyncio.Condition()

    async def start(self) -> None:
        self._session = aiohttp.ClientSession()
        for _ in range(300):  # the controller starts before the brokers; bounded anyway (~30 s)
            try:
                await self._poll(0)
                break
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                LOG.debug("controller not reachable yet: %s", exc)
                await asyncio.sleep(0.1)
        self._task = asyncio.create_task(self._watch())

    def synced(self) -> bool:
        return self.version > 0

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        if self._session is not None:
            await self._session.close()

    async def _poll(self, wait: float) -> None:
        assert self._session is not None
        timeout = aiohttp.ClientTimeout(total=wait + 5)
        params = {"after": str(self.version), "wait": str(wait)}
        async with self._session.get(
            f"{self.url}/assignments", params=params, timeout=timeout, headers=self.headers
        ) as resp:
            resp.raise_for_status()
            data = await resp.json()
        version = int(data["version"])
        if version <= self.version:
            return
        partitions = [PartitionAssignment.model_validate(p) for p in data.get("partitions", [])]
        brokers = [BrokerEntry.model_validate(b) for b in data.get("brokers", [])]
        self.version = version
        self.update(partitions, brokers)
        async with self._applied:
            self._applied.notify_all()

    async def _watch(self) -> None:
        while True:
            try:
                await self._poll(self.poll_wait_s)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                LOG.debug("assignment poll failed: %s", exc)
                await asyncio.sleep(0.1)

    async def wait_version(self, version: int, timeout: float) -> bool:  # noqa: ASYNC109
        """Wait until the table version ``version`` (or newer) has been applied."""
        try:
            async with asyncio.timeout(timeout):
                async with self._applied:
                    await self._applied.wait_for(lambda: self.version >= version)
        except TimeoutError:
            return False
        return True
