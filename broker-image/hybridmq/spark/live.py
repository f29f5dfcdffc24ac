"""A :class:`PartitionSource` over a running cluster, through ``hybridmq.client``.

Listing works with today's client: ``hybridmq.client.admin`` ``directory`` (partition names and
types, through any CM) and ``mm-stats`` (each MM's ``end_offset`` per partition; the primary's is
used; the log start is taken as 0 because no command reports it yet).

Reading an offset range uses the fetch-by-offset client API, ``hybridmq.client.Fetcher``
(``client/fetcher.py``; FETCH / FETCH_META frames through a CM). It is duck-typed to this shape
(the admin listing above is the fallback when ``hybridmq.client`` has no ``Fetcher``)::

    fetcher = await hybridmq.client.Fetcher.connect(bootstrap, user=..., password=...)
    await fetcher.partitions() -> list of objects/dicts with
        name, type, start_offset (log start), end_offset (high watermark: committed end),
        incarnation (random id born with the partition's data; new when it is re-created)
    await fetcher.fetch(partition, offset, max_offset=end, max_bytes=n) -> result with
        start_offset, end_offset, batches: list of objects/dicts with
            base_offset, count, destination, producer_id (str), producer_epoch, base_sequence,
            timestamp_ms, control (bool), records: list of [value, key, headers, timestamp_ms]
        raising ClientError(UNKNOWN_PARTITION) for a partition that is gone and
        ClientError(OFFSET_OUT_OF_RANGE) (with ``start_offset``) for an offset below the log start
    await fetcher.close()

A record's ``producer_id`` is the batch's producer id, suffixed ``.<producer epoch>`` when the
epoch is not 0 (a producer restarts its sequence at 0 in a new epoch), and its ``sequence`` is
``base_sequence + index``.
"""

import asyncio
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from hybridmq.protocol.deadline import within
from hybridmq.spark.headers import header_rows
from hybridmq.spark.schema import arrow_schema
from hybridmq.spark.source import DataLossError, PartitionGoneError, PartitionInfo

FETCH_BYTES = 4 * 1024 * 1024
UNKNOWN_PARTITION = 20  # hybridmq.api.frames.ErrorCode.UNKNOWN_PARTITION
OFFSET_OUT_OF_RANGE = 27  # hybridmq.api.frames.ErrorCode.OFFSET_OUT_OF_RANGE


# Of the read's timeout, how long a range may wait for a committed end that went back.
GAP_WAIT_SHARE = 0.8


class FetchUnsupportedError(NotImplementedError):
    pass


class CommittedEndBehindError(Exception):
    """The partition's committed end stayed below a planned range's end: the read fails (Spark
    retries the task) rather than return part of the range as if it were all of it."""

    def __init__(self, partition: str, offset: int, end: int, committed: int) -> None:
        super().__init__(
            f"partition {partition}: offsets [{offset}, {end}) were committed when the batch was planned"
            f" but its primary's committed end is {committed}"
        )
        self.partition, self.offset, self.end, self.committed = partition, offset, end, committed


def _get(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(name, default)
    return getattr(obj, name, default)


def _fetcher_class() -> Any:
    import hybridmq.client as client

    fetcher = getattr(client, "Fetcher", None)
    if fetcher is None:
        raise FetchUnsupportedError(
            "hybridmq.client has no Fetcher (fetch records by partition and offset range) yet;"
            " live reads need it. Export the cluster with a Fetcher-capable client, or read an"
            " exported log with option 'path'."
        )
    return fetcher


class LiveClusterSource:
    def __init__(
        self, bootstrap: str, user: str | None = None, password: str | None = None, timeout: float = 30.0
    ) -> None:
        self.bootstrap = bootstrap
        self.user = user
        self.password = password
        self.timeout = timeout

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> "LiveClusterSource":
        return cls(
            options["bootstrap"],
            options.get("username"),
            options.get("password"),
            float(options.get("timeout", "30")),
        )

    def _run(self, coro: Any) -> Any:
        return asyncio.run(within(coro, self.timeout))

    # -- listing -------------------------------------------------------------------------------
    def list_partitions(self) -> list[PartitionInfo]:
        return sorted(self._run(self._list()), key=lambda p: p.name)

    async def _list(self) -> list[PartitionInfo]:
        try:
            fetcher_cls = _fetcher_class()
        except FetchUnsupportedError:
            return await self._list_with_admin()
        fetcher = await fetcher_cls.connect(self.bootstrap, user=self.user, password=self.password)
        try:
            return [
                PartitionInfo(
                    str(_get(p, "name")),
                    str(_get(p, "type")),
                    int(_get(p, "start_offset", 0)),
                    int(_get(p, "end_offset", 0)),
                    None if _get(p, "incarnation") is None else str(_get(p, "incarnation")),
                )
                for p in await fetcher.partitions()
            ]
        finally:
            await fetcher.close()

    async def _list_with_admin(self) -> list[PartitionInfo]:
        from hybridmq.client import admin

        directory = (await admin(self.bootstrap, "directory", user=self.user, password=self.password))[0]
        stats = await admin(self.bootstrap, "mm-stats", user=self.user, password=self.password)
        ends: dict[tuple[str, str], int] = {}
        for mm in stats:
            if isinstance(mm, Mapping):
                for name, info in (mm.get("partitions") or {}).items():
                    ends[(str(mm.get("node")), name)] = int(info.get("end_offset", 0))
        found = []
        for p in directory.get("partitions", []):
            name, primary = str(p["name"]), str(p.get("primary"))
            found.append(PartitionInfo(name, str(p["type"]), 0, ends.get((primary, name), 0)))
        return found

    # -- reading -------------------------------------------------------------------------------
    def read_range(
        self,
        partition: str,
        start: int,
        end: int,
        columns: Sequence[str],
        dictionaries: bool = False,
    ) -> Iterator[pa.RecordBatch]:
        fetcher_cls = _fetcher_class()
        schema = arrow_schema(columns)
        rows = self._run(self._fetch_all(fetcher_cls, partition, start, end))
        if not rows:
            return iter(())
        table = pa.Table.from_pylist([{c: r.get(c) for c in columns} for r in rows], schema=schema)
        return iter(table.to_batches(max_chunksize=65536))

    async def _fetch_all(
        self, fetcher_cls: Any, partition: str, start: int, end: int
    ) -> list[dict[str, Any]]:
        from hybridmq.client import ClientError

        fetcher = await fetcher_cls.connect(self.bootstrap, user=self.user, password=self.password)
        try:
            ptype = ""
            for p in await fetcher.partitions():
                if _get(p, "name") == partition:
                    ptype = str(_get(p, "type"))
            rows: list[dict[str, Any]] = []
            offset = start
            loop = asyncio.get_running_loop()
            gap_deadline, gap_delay = loop.time() + self.timeout * GAP_WAIT_SHARE, 0.05
            while offset < end:
                try:
                    result = await fetcher.fetch(partition, offset, max_offset=end, max_bytes=FETCH_BYTES)
                except ClientError as err:
                    if err.code == UNKNOWN_PARTITION:
                        raise PartitionGoneError(partition) from None
                    if err.code == OFFSET_OUT_OF_RANGE:
                        raise DataLossError(
                            partition, offset, int(getattr(err, "start_offset", end))
                        ) from None
                    raise
                batches = list(_get(result, "batches", []))
                if not batches:
                    # The range was planned from a committed end that the partition's primary has
                    # not reached again yet (a new primary learns it on its backups' next fetch):
                    # wait for it; ending the read here would skip the rest of the range for good.
                    committed = int(_get(result, "end_offset", offset))
                    if loop.time() > gap_deadline:
                        raise CommittedEndBehindError(partition, offset, end, committed)
                    await asyncio.sleep(min(gap_delay, max(gap_deadline - loop.time(), 0.0) + 0.001))
                    gap_delay = min(gap_delay * 2, 0.5)
                    continue
                gap_delay = 0.05
                for batch in batches:
                    offset = self._append_batch(rows, batch, partition, ptype, offset, end)
            return rows
        finally:
            await fetcher.close()

    @staticmethod
    def _append_batch(
        rows: list[dict[str, Any]], batch: Any, partition: str, ptype: str, offset: int, end: int
    ) -> int:
        base = int(_get(batch, "base_offset"))
        count = int(_get(batch, "count"))
        if _get(batch, "control", False):
            return max(offset, base + count)
        pid = _get(batch, "producer_id")
        pep = int(_get(batch, "producer_epoch", 0) or 0)
        producer = None if pid is None else str(pid) if pep in (0, -1) else f"{pid}.{pep}"
        base_seq = int(_get(batch, "base_sequence", -1))
        destination = _get(batch, "destination")
        for i, record in enumerate(_get(batch, "records", [])):
            o = base + i
            if o < offset or o >= end:
                continue
            value, key, headers, ts_ms = (list(record) + [None] * 4)[:4]
            rows.append(
                {
                    "partition": partition,
                    "partition_type": ptype,
                    "offset": o,
                    "destination": destination,
                    "key": key.encode() if isinstance(key, str) else key,
                    "producer_id": producer,
                    "sequence": base_seq + i if base_seq >= 0 else None,
                    "timestamp": datetime.fromtimestamp(ts_ms / 1000, UTC) if ts_ms is not None else None,
                    "headers": header_rows(headers),
                    "value": value if isinstance(value, bytes | None) else str(value).encode(),
                }
            )
        return max(offset, base + count)

    def close(self) -> None:
        pass
