"""Replication between MMs over the binary protocol: frame types, peer links, the backup's transport.

A backup MM opens one connection per primary MM (``HELLO role=mm``, the cluster secret as password)
and sends, pipelined on it:

=================  ==============================================================================
REPLICA_FETCH      c, m (``FetchRequest`` as ``to_wire`` dict) -> OK {r, m: ``FetchResponse``, with
                   ``incarnation``: the partition's, which the backup adopts}
REPLICA_EPOCH_END  c, m (``EpochEndOffsetRequest``) -> OK {r, m: ``EpochEndOffsetResponse``}
REPLICA_SNAPSHOT   c, m (``SnapshotRequest``) -> OK {r, m: ``Snapshot``}
=================  ==============================================================================

By default the fetches do not travel one by one: REPLICA_FETCH_BATCH (``mm/replica_batch.py``)
carries every partition's fetch from this MM to one primary MM in one frame
(``HYBRIDMQ_REPLICA_FETCH=single`` goes back to one REPLICA_FETCH per partition).

Every request carries the partition epoch (``m.epoch``); the primary refuses older ones
(``STALE_EPOCH``) and steps down on a newer one. Errors travel inside the response (``m.error``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from hybridmq.api.assignment import BrokerRole
from hybridmq.api.frames import PROTOCOL_VERSION, ErrorCode, FrameType
from hybridmq.broker.mm.replica_batch import FetchBatcher
from hybridmq.broker.replication import (
    EpochEndOffsetRequest,
    EpochEndOffsetResponse,
    FetchRequest,
    FetchResponse,
    Snapshot,
    SnapshotRequest,
    from_wire,
    to_wire,
)
from hybridmq.protocol import Connection, RemoteError, open_connection
from hybridmq.protocol.codec import ProtocolError
from hybridmq.protocol.connection import ConnectionClosed
from hybridmq.protocol.tls import BrokerTls

log = logging.getLogger(__name__)

REPLICA_FRAMES = frozenset(
    {
        FrameType.REPLICA_FETCH,
        FrameType.REPLICA_EPOCH_END,
        FrameType.REPLICA_SNAPSHOT,
        FrameType.REPLICA_FETCH_BATCH,
    }
)


class PeerLinks:
    """Connections from this MM to the other MMs, opened on demand and reopened after a failure."""

    def __init__(
        self, node: str, address_of: Callable[[str], str | None], token: str | None, max_frame: int
    ) -> None:
        self.node = node
        self.address_of = address_of
        self.token = token
        self.max_frame = max_frame
        self._conns: dict[str, Connection] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._runners: set[asyncio.Task[None]] = set()
        self.tls: BrokerTls | None = None  # mutual TLS to the peers (set by the MM that has it)

    async def _conn(self, peer: str) -> Connection:
        conn = self._conns.get(peer)
        if conn is not None and not conn.closed:
            return conn
        async with self._locks.setdefault(peer, asyncio.Lock()):
            conn = self._conns.get(peer)
            if conn is not None and not conn.closed:
                return conn
            address = self.address_of(peer)
            if not address:
                raise ConnectionError(f"no address for {peer}")
            host, _, port = address.rpartition(":")
            hello = {
                "t": FrameType.HELLO,
                "v": PROTOCOL_VERSION,
                "id": self.node,
                "role": BrokerRole.MM,
                "user": "mm",
                "password": self.token,
            }
            try:
                async with asyncio.timeout(2.0):
                    fresh, _ = await open_connection(
                        host,
                        int(port),
                        hello,
                        self.max_frame,
                        name=f"{self.node}->{peer}",
                        ssl=self.tls.client() if self.tls is not None else None,
                    )
            except (ConnectionClosed, RemoteError, ProtocolError) as exc:
                # Ended or refused during the handshake: a transport error like any other (the
                # backup's fetch loop retries those; anything else ended it for good).
                raise ConnectionError(f"{peer}: handshake failed: {exc}") from None
            runner = asyncio.create_task(fresh.run())
            self._runners.add(runner)
            runner.add_done_callback(self._runners.discard)
            self._conns[peer] = fresh
            return fresh

    async def request(self, peer: str, frame: dict[str, Any], timeout: float) -> dict[str, Any]:  # noqa: ASYNC109
        """The response message ``m`` of the OK reply."""
        return dict((await self.request_frame(peer, frame, timeout))["m"])

    async def request_frame(self, peer: str, frame: dict[str, Any], timeout: float) -> dict[str, Any]:  # noqa: ASYNC109
        conn = await self._conn(peer)
        try:
            reply = await conn.request(frame, timeout)
        except (ConnectionClosed, RemoteError) as exc:
            raise ConnectionError(f"{peer}: {exc}") from None
        except TimeoutError:
            conn.close()  # a frozen peer: do not let requests pile up behind it
            raise
        return dict(reply)

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()
        for runner in list(self._runners):
            runner.cancel()


class TcpPrimaryTransport:
    """A ``PrimaryTransport`` (see ``hybridmq.broker.replication.backup``) to one primary MM."""

    def __init__(
        self,
        links: PeerLinks,
        peer: str,
        *,
        timeout_s: float = 3.0,
        on_incarnation: Callable[[str], Awaitable[None]] | None = None,
        batcher: FetchBatcher | None = None,
    ) -> None:
        self.links = links
        self.peer = peer
        self.timeout_s = timeout_s
        self.on_incarnation = on_incarnation  # told the primary's partition incarnation
        self.batcher = batcher  # the batched fetches to this peer; None: one frame per fetch

    async def fetch(self, request: FetchRequest) -> FetchResponse:
        if self.batcher is not None:
            response, incarnation = await self.batcher.fetch(request)
            if self.on_incarnation is not None and incarnation and response.error == ErrorCode.NONE:
                await self.on_incarnation(incarnation)  # stored before the records it came with
            return response
        timeout = self.timeout_s + request.max_wait_ms / 1000.0
        data = await self.links.request(
            self.peer, {"t": FrameType.REPLICA_FETCH, "m": to_wire(request)}, timeout
        )
        response = from_wire(FetchResponse, data)
        incarnation = data.get("incarnation")
        if self.on_incarnation is not None and incarnation and response.error == ErrorCode.NONE:
            await self.on_incarnation(str(incarnation))
        return response

    async def end_offset_for_epoch(self, request: EpochEndOffsetRequest) -> EpochEndOffsetResponse:
        data = await self.links.request(
            self.peer, {"t": FrameType.REPLICA_EPOCH_END, "m": to_wire(request)}, self.timeout_s
        )
        return from_wire(EpochEndOffsetResponse, data)

    async def snapshot(self, request: SnapshotRequest) -> Snapshot:
        data = await self.links.request(
            self.peer, {"t": FrameType.REPLICA_SNAPSHOT, "m": to_wire(request)}, 30.0
        )
        return from_wire(Snapshot, data)
