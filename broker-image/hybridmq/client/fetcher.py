"""Read partitions by offset: ``Fetcher`` (FETCH / FETCH_META through a CM).

For tools that read the log itself rather than consume destinations - the PySpark data source and
the delivery audit::

    fetcher = await Fetcher.connect("127.0.0.1:7000", user="alice", password="...")
    for p in await fetcher.partitions():          # name, type, start_offset, end_offset, ...
        offset = p.start_offset
        while offset < p.end_offset:
            result = await fetcher.fetch(p.name, offset, max_offset=p.end_offset)
            for batch in result.batches:          # whole stored batches, in offset order
                for i, (value, key, headers, ts_ms) in enumerate(batch.records):
                    ...                           # offset batch.base_offset + i
            offset = result.next_offset
    await fetcher.commit_reader("my-job", p.name, offset)   # optional: hold the data until read
    await fetcher.close()

Offsets count records; ``end_offset`` is the high watermark (the committed end: nothing at or past
it is returned). A fetch returns whole batches, so the first one may start below the requested
offset (skip those records). ``control`` batches (the broker's cursor snapshots, and batches the
session may not see, ``skipped`` = "acl" | "internal") carry no records but advance the offset.

A record's producer identity is ``FetchedBatch.producer`` (``"<pid>"``, or ``"<pid>.<producer
epoch>"`` when the epoch is not 0) and its sequence ``base_sequence + index`` - the same ids a
producer's ``send_log`` writes (``client/send_log.py``).

Errors: ``ClientError`` with ``code`` UNKNOWN_PARTITION (the partition is gone) or
:class:`OffsetOutOfRangeError` (the offset is below the log start; ``start_offset`` says where the
log starts now). Transient errors (MM down, new primary, lost CM) are retried for ``retry_s``
seconds, reconnecting to the bootstrap CMs when the connection is lost.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hybridmq.api.frames import BatchFlag, ErrorCode, FrameType
from hybridmq.client.connection import ClientError, connect
from hybridmq.client.distribution import Strategy
from hybridmq.client.message import unpack_records
from hybridmq.client.send_log import producer_key
from hybridmq.client.session import ClientClosedError, unclosed
from hybridmq.client.transport import Transport
from hybridmq.protocol import Connection, RemoteError
from hybridmq.protocol.connection import ConnectionClosed
from hybridmq.protocol.tls import SslOption

DEFAULT_MAX_BYTES = 4 * 1024 * 1024
TRANSIENT = frozenset({ErrorCode.MM_UNAVAILABLE, ErrorCode.NOT_PRIMARY, ErrorCode.STALE_EPOCH})


class OffsetOutOfRangeError(ClientError):
    """The requested offset is below the partition's log start (retention removed it)."""

    def __init__(self, msg: str, start_offset: int, end_offset: int) -> None:
        super().__init__(ErrorCode.OFFSET_OUT_OF_RANGE, msg)
        self.start_offset = start_offset
        self.end_offset = end_offset


@dataclass(frozen=True, slots=True)
class PartitionMeta:
    name: str
    type: str  # "fixed" | "on-demand" | "internal" (an MM's log partition, with ``internal=True``)
    start_offset: int  # log start: the earliest offset still stored
    end_offset: int  # high watermark: the committed end (exclusive)
    log_end_offset: int  # may be ahead of end_offset while records are not committed yet
    primary: str | None
    epoch: int
    writable: bool
    # A random id born with the partition's data: a new one means the partition was re-created
    # (an on-demand name reused after garbage collection, a fixed partition whose data was lost).
    incarnation: str | None = None


@dataclass(slots=True)
class FetchedBatch:
    base_offset: int
    count: int
    destination: str | None
    producer_id: str | None  # the idempotence id as a string; None without one
    producer_epoch: int
    base_sequence: int  # -1 without idempotence
    timestamp_ms: int  # when the MM stored the batch
    control: bool
    records: list[list[Any]]  # [value, key, headers, timestamp_ms]; empty for control batches
    flags: int = 0
    attributes: dict[str, Any] | None = None
    skipped: str | None = None  # "acl" | "internal": a stub for a batch this session may not see

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.count

    @property
    def producer(self) -> str | None:
        """``"<pid>"`` or ``"<pid>.<producer epoch>"`` (epoch not 0): the audit's producer id."""
        if self.producer_id is None:
            return None
        return producer_key(int(self.producer_id), self.producer_epoch)

    def sequence(self, index: int) -> int | None:
        return self.base_sequence + index if self.base_sequence >= 0 else None


@dataclass(slots=True)
class FetchResult:
    partition: str
    start_offset: int  # log start
    end_offset: int  # high watermark when the MM answered
    batches: list[FetchedBatch] = field(default_factory=list)
    next_offset: int = 0  # where the next fetch continues (the requested offset if nothing came)


def decode_batch(entry: dict[str, Any]) -> FetchedBatch:
    control = bool(entry.get("ctl"))
    pid = int(entry.get("pid", -1))
    flags = int(entry.get("f", 0) or 0)
    extra = entry.get("xa")
    records: list[list[Any]] = []
    if not control:
        blob = entry.get("b") or b""
        if flags & BatchFlag.CHUNK:
            # one chunk of a very large message: the blob is the raw chunk bytes
            info = extra or {}
            records = [[blob, info.get("key"), info.get("h"), int(entry.get("ts", 0))]]
        else:
            records = unpack_records(blob)
    return FetchedBatch(
        base_offset=int(entry["o"]),
        count=int(entry["n"]),
        destination=entry.get("d"),
        producer_id=str(pid) if pid >= 0 else None,
        producer_epoch=int(entry.get("pep", 0) or 0),
        base_sequence=int(entry.get("seq", -1)),
        timestamp_ms=int(entry.get("ts", 0) or 0),
        control=control,
        records=records,
        flags=flags,
        attributes=extra,
        skipped=entry.get("skip"),
    )


class Fetcher:
    def __init__(
        self,
        conn: Connection,
        runner: asyncio.Task[None],
        reconnect: Any,
        *,
        retry_s: float = 15.0,
        request_timeout: float = 60.0,
    ) -> None:
        self.conn = conn
        self._runner = runner
        self._reconnect = reconnect
        self.retry_s = retry_s
        self.request_timeout = request_timeout
        self._closed = False

    @classmethod
    async def connect(
        cls,
        bootstrap: str | list[str] | None = None,
        *,
        user: str | None = None,
        password: str | None = None,
        client_id: str | None = None,
        app: str | None = None,
        strategy: Strategy | None = None,
        retry_s: float = 15.0,
        request_timeout: float = 60.0,
        ssl: SslOption = None,
    ) -> Fetcher:
        transport = Transport.of(ssl)

        async def reconnect() -> tuple[Connection, asyncio.Task[None]]:
            conn, _ = await connect(
                bootstrap,
                user=user,
                password=password,
                client_id=client_id,
                app=app,
                strategy=strategy,
                ssl=transport,
            )
            return conn, asyncio.create_task(conn.run())

        conn, runner = await reconnect()
        return cls(conn, runner, reconnect, retry_s=retry_s, request_timeout=request_timeout)

    async def __aenter__(self) -> Fetcher:
        """``async with await Fetcher.connect(...) as f``: connected already; closed at the end."""
        if self._closed:
            raise ClientClosedError("the fetcher is closed")
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def closed(self) -> bool:
        """``close()`` was called."""
        return self._closed

    def __del__(self, _unclosed: Callable[[object, str], None] = unclosed) -> None:
        if getattr(self, "_closed", True) is False:
            _unclosed(self, "Fetcher")

    async def _request(self, frame: dict[str, Any]) -> dict[str, Any]:
        """One request, retried on transient errors and lost connections for ``retry_s``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.retry_s
        delay = 0.05
        while True:
            if self._closed:
                raise ClientClosedError("the fetcher is closed")
            try:
                if self.conn.closed:
                    self._runner.cancel()
                    self.conn, self._runner = await self._reconnect()
                    if self._closed:  # closed while reconnecting
                        self.conn.close()
                        self._runner.cancel()
                        continue
                reply: dict[str, Any] = await self.conn.request(dict(frame), timeout=self.request_timeout)
                return reply
            except RemoteError as exc:
                if exc.code not in TRANSIENT or loop.time() + delay > deadline:
                    raise _client_error(exc) from None
            except (ConnectionError, ConnectionClosed, OSError, TimeoutError):
                if self._closed or loop.time() + delay > deadline:
                    raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)

    async def partitions(
        self, names: list[str] | None = None, *, internal: bool = False
    ) -> list[PartitionMeta]:
        """Every partition (or those named) with its log start and high watermark, by name.

        ``internal`` adds the internal log partition of each MM that answers (type
        ``"internal"``, ``_log.<mm>``: the ``topic:_LOG`` events, which are never stored in a user
        partition); read it with ``fetch(..., internal=True)``.

        A partition whose primary does not answer is retried for ``retry_s``; then the error
        (MM_UNAVAILABLE / NOT_PRIMARY) is raised as ``ClientError``.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.retry_s
        frame: dict[str, Any] = {"t": FrameType.FETCH_META}
        if names is not None:
            frame["p"] = list(names)
        if internal:
            frame["i"] = True
        while True:
            reply = await self._request(frame)
            entries = list(reply.get("partitions") or [])
            missing = [e for e in entries if e.get("err")]
            if not missing:
                return [
                    PartitionMeta(
                        name=str(e["name"]),
                        type=str(e["type"]),
                        start_offset=int(e["start"]),
                        end_offset=int(e["hw"]),
                        log_end_offset=int(e["end"]),
                        primary=e.get("primary"),
                        epoch=int(e.get("epoch", 0)),
                        writable=bool(e.get("writable", True)),
                        incarnation=None if e.get("incarnation") is None else str(e["incarnation"]),
                    )
                    for e in entries
                ]
            if loop.time() > deadline:
                err = str(missing[0]["err"])
                code = ErrorCode[err] if err in ErrorCode.__members__ else ErrorCode.MM_UNAVAILABLE
                raise ClientError(code, f"no offsets for {', '.join(str(e['name']) for e in missing)}")
            await asyncio.sleep(0.2)

    async def fetch(
        self,
        partition: str,
        offset: int,
        *,
        max_offset: int | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
        internal: bool = False,
    ) -> FetchResult:
        """Whole batches holding offsets ``[offset, min(max_offset, high watermark))``.

        About ``max_bytes`` of them (at least one batch when any record is in range); an empty
        ``batches`` means nothing is there (yet). ``internal`` also returns ``topic:_LOG`` and
        ``queue:_DMQ`` batches (when the consume ACL allows) and reads the MMs' internal log
        partitions (``partitions(internal=True)``).
        """
        frame: dict[str, Any] = {"t": FrameType.FETCH, "p": partition, "o": int(offset), "mb": int(max_bytes)}
        if max_offset is not None:
            frame["e"] = int(max_offset)
        if internal:
            frame["i"] = True
        reply = await self._request(frame)
        batches = [decode_batch(b) for b in reply.get("batches") or []]
        return FetchResult(
            partition=partition,
            start_offset=int(reply.get("start", 0)),
            end_offset=int(reply.get("hw", 0)),
            batches=batches,
            next_offset=max(int(offset), batches[-1].next_offset) if batches else int(offset),
        )

    async def commit_reader(self, reader: str, partition: str, offset: int) -> None:
        """Commit named reader ``reader``'s position in ``partition``: it has processed every record
        below ``offset``. Stored in the partition log (replicated) before this returns; a draining
        on-demand partition is not deleted while a named reader is behind its end (like a Kafka
        consumer group's committed offsets holding data, but for a partition that goes away)."""
        await self._request({"t": FrameType.READER_COMMIT, "p": partition, "rn": reader, "o": int(offset)})

    async def close(self) -> None:
        self._closed = True
        self.conn.close()
        self._runner.cancel()


def _client_error(exc: RemoteError) -> ClientError:
    if exc.code == ErrorCode.OFFSET_OUT_OF_RANGE:
        return OffsetOutOfRangeError(exc.msg, int(exc.details.get("start", 0)), int(exc.details.get("hw", 0)))
    return ClientError(exc.code, exc.msg)
