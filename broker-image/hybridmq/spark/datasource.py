"""The ``hybridmq`` Python data source (Spark 4 Python Data Source API): batch and streaming reads.

Register and read::

    from hybridmq.spark.datasource import HybridMQDataSource
    spark.dataSource.register(HybridMQDataSource)
    df = spark.read.format("hybridmq").option("path", "/exports/run-1").load()
    stream = (spark.readStream.format("hybridmq").option("bootstrap", "127.0.0.1:7000")
              .option("maxOffsetsPerTrigger", 100_000).load())

Options are documented in :mod:`hybridmq.spark.options`. Each broker partition (or each
``offsetsPerSplit`` slice of it) becomes one Spark input partition whose rows arrive in offset
order. Streaming offsets (:mod:`hybridmq.spark.positions`) hold, per partition, the next offset to
read, its end when last listed and its incarnation: a partition missing from a start offset (one
that appeared after it, or was re-created) is read from offset 0, so a restarted query replays
exactly the checkpointed ``[start, end)`` ranges, and a partition that vanished with unread records,
even while the query was stopped, is reported with the exact lost range (``failOnDataLoss``).
"""

import logging
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from hybridmq.spark.offsets import (
    EARLIEST,
    LATEST,
    OffsetMap,
    check_named,
    check_within,
    limit_advance,
    resolve,
)
from hybridmq.spark.options import ReaderOptions
from hybridmq.spark.positions import Position, decode, encode, next_offsets
from hybridmq.spark.ranges import OffsetRange, plan_ranges
from hybridmq.spark.reader_cursor import commit_processed
from hybridmq.spark.reading import read_range
from hybridmq.spark.schema import parse_columns, spark_ddl
from hybridmq.spark.source import PartitionInfo, open_source
from hybridmq.spark.timestamps import resolve_timestamps

log = logging.getLogger("hybridmq.spark")


class HybridMQDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "hybridmq"

    def schema(self) -> str:
        return spark_ddl(ReaderOptions.parse(self.options).columns)

    def reader(self, schema: StructType) -> DataSourceReader:
        return HybridMQBatchReader(_options_for(self.options, schema))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return HybridMQStreamReader(_options_for(self.options, schema))


def _options_for(options: Any, schema: StructType) -> ReaderOptions:
    parsed = ReaderOptions.parse(options)
    names = tuple(schema.fieldNames())
    if names != parsed.columns:  # a user-specified schema selects the columns
        parsed = ReaderOptions.parse({**dict(options), "columns": ",".join(parse_columns(",".join(names)))})
    return parsed


def _list(opts: ReaderOptions) -> list[PartitionInfo]:
    source = open_source(opts.source)
    try:
        return [p for p in source.list_partitions() if opts.wants(p.name, p.type)]
    finally:
        source.close()


def starting_offsets(opts: ReaderOptions, infos: list[PartitionInfo]) -> OffsetMap:
    """``startingOffsets`` (and ``startingOffsetsByTimestamp``) for ``infos``, checked."""
    check_named("startingOffsets", opts.starting, infos)
    starting = resolve(opts.starting, infos, EARLIEST)
    check_within("startingOffsets", starting, infos)
    if opts.starting_timestamps:
        check_named("startingOffsetsByTimestamp", opts.starting_timestamps, infos)
        source = open_source(opts.source)
        try:
            starting.update(resolve_timestamps(source, opts.starting_timestamps, infos))
        finally:
            source.close()
    return starting


def ending_offsets(opts: ReaderOptions, infos: list[PartitionInfo]) -> OffsetMap:
    check_named("endingOffsets", opts.ending, infos)
    return resolve(opts.ending, infos, LATEST)


def check_order(starting: OffsetMap, ending: OffsetMap, infos: list[PartitionInfo]) -> None:
    """A start after the end (``latest`` .. ``earliest`` included) is refused, as Kafka's source does."""
    for p in infos:
        if starting[p.name] > ending[p.name]:
            raise ValueError(
                f"option startingOffsets starts partition {p.name} at {starting[p.name]}, after where"
                f" option endingOffsets ends it ({ending[p.name]})"
            )


class HybridMQBatchReader(DataSourceReader):
    def __init__(self, opts: ReaderOptions) -> None:
        self.opts = opts

    def partitions(self) -> list[InputPartition]:
        if self.opts.starting == LATEST:
            raise ValueError(
                "option startingOffsets: 'latest' is not allowed in a batch query (nothing to read)"
            )
        if self.opts.ending == EARLIEST:
            raise ValueError(
                "option endingOffsets: 'earliest' is not allowed in a batch query (nothing to read)"
            )
        infos = _list(self.opts)
        starting = starting_offsets(self.opts, infos)
        ending = ending_offsets(self.opts, infos)
        check_within("endingOffsets", ending, infos)
        check_order(starting, ending, infos)
        spans = [(p.name, p.type, starting[p.name], ending[p.name]) for p in infos]
        return list(plan_ranges(spans, self.opts.offsets_per_split))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, OffsetRange):
            return iter(())  # Spark plans one empty InputPartition when partitions() is empty
        return read_range(self.opts.source, partition, self.opts.columns, self.opts.fail_on_data_loss)


class HybridMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader. Lives in one driver-side Python process for the whole query run.

    It keeps no state that matters across restarts: everything it needs to notice lost data is in
    the offsets Spark checkpoints (:mod:`hybridmq.spark.positions`).
    """

    def __init__(self, opts: ReaderOptions) -> None:
        self.opts = opts
        self._types: dict[str, str] = {}
        self._listed: dict[str, PartitionInfo] = {}  # the last listing
        self._available_now: OffsetMap | None = None
        self._last_batch = time.monotonic()  # for minOffsetsPerTrigger / maxTriggerDelay

    # -- offsets -----------------------------------------------------------------------------
    def _refresh(self) -> list[PartitionInfo]:
        infos = _list(self.opts)
        for info in infos:
            self._types[info.name] = info.type
        self._listed = {p.name: p for p in infos}
        return infos

    def _caps(self, infos: list[PartitionInfo]) -> dict[str, int]:
        """How far each partition may be read now: its end, ``endingOffsets``, an availableNow target."""
        ending = None if self.opts.ending == LATEST else ending_offsets(self.opts, infos)
        caps: dict[str, int] = {}
        for info in infos:
            cap = info.end
            if ending is not None:
                cap = min(cap, ending[info.name])
            if self._available_now is not None:
                if info.name not in self._available_now:
                    continue  # appeared after the availableNow target was fixed
                cap = min(cap, self._available_now[info.name])
            caps[info.name] = cap
        return caps

    def initialOffset(self) -> dict:
        infos = self._refresh()
        starting = starting_offsets(self.opts, infos)
        if self.opts.ending != LATEST:  # a stream waits for records up to endingOffsets, never past it
            check_order(starting, ending_offsets(self.opts, infos), infos)
        caps = self._caps(infos)
        return encode(
            {
                p.name: Position(
                    starting[p.name], max(starting[p.name], caps.get(p.name, p.end)), p.incarnation
                )
                for p in infos
            }
        )

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_records_per_batch is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.opts.max_records_per_batch)

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = {p.name: p.end for p in self._refresh()}

    def reportLatestOffset(self) -> dict | None:
        return {p.name: p.end for p in self._refresh()}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = decode(start)
        infos = self._refresh()
        listed = {p.name: p for p in infos}
        for name, gone in begin.items():
            if name not in listed:
                self._lost(name, gone, "is gone")
        caps = self._caps(infos)
        from_offsets: OffsetMap = {}
        available: OffsetMap = {}
        for info in infos:
            if info.name not in caps:
                continue
            pos: Position | None = begin.get(info.name)
            if pos is not None and not pos.same_partition(info.incarnation):
                self._lost(info.name, pos, "was deleted and re-created")
                pos = None
            offset = 0 if pos is None else pos.offset  # a new partition is read from its beginning
            if info.end < offset:
                self._data_loss(f"partition {info.name} ends at {info.end}, before offset {offset}")
            from_offsets[info.name] = offset
            available[info.name] = max(offset, caps[info.name])
        if isinstance(limit, ReadMaxRows):
            end = limit_advance(from_offsets, available, limit.max_rows)
        else:
            end = available
        if not self._enough(from_offsets, end):
            return start
        positions = {
            p.name: Position(end[p.name], available[p.name], p.incarnation) for p in infos if p.name in end
        }
        latest = encode(positions)
        if latest != start:
            self._last_batch = time.monotonic()
        return latest

    def _enough(self, begin: OffsetMap, end: OffsetMap) -> bool:
        """minOffsetsPerTrigger: wait for that many offsets, or until maxTriggerDelay has passed."""
        wanted = self.opts.min_offsets_per_trigger
        if wanted is None or self._available_now is not None:
            return True
        waited_ms = (time.monotonic() - self._last_batch) * 1000
        return sum(end[p] - begin[p] for p in end) >= wanted or waited_ms >= self.opts.max_trigger_delay_ms

    def _lost(self, name: str, pos: Position, what: str) -> None:
        if pos.offset < pos.end:
            self._data_loss(f"partition {name} {what}: offsets [{pos.offset}, {pos.end}) were not read")
        else:
            log.info("partition %s %s (read up to %d)", name, what, pos.offset)

    def _data_loss(self, message: str) -> None:
        if self.opts.fail_on_data_loss:
            raise RuntimeError(f"{message} (set failOnDataLoss=false to go on)")
        log.warning("%s; skipping them (failOnDataLoss=false)", message)

    # -- planning and reading ------------------------------------------------------------------
    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        begin, stop = decode(start), decode(end)
        if any(name not in self._listed for name in stop):
            self._refresh()  # a batch planned by an earlier run, replayed after a restart
        spans = []
        for name, pos in sorted(stop.items()):
            prev = begin.get(name)
            offset = prev.offset if prev is not None and prev.same_partition(pos.incarnation) else 0
            now = self._listed.get(name)
            if now is not None and not pos.same_partition(now.incarnation):
                # Re-created since the batch was planned: its range is not in the new partition.
                self._lost(name, Position(offset, pos.end), "was deleted and re-created")
                continue
            spans.append((name, self._types.get(name, ""), offset, pos.offset))
        return list(plan_ranges(spans, self.opts.offsets_per_split))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, OffsetRange):
            return iter(())  # Spark plans one empty InputPartition when partitions() is empty
        return read_range(self.opts.source, partition, self.opts.columns, self.opts.fail_on_data_loss)

    def commit(self, end: dict) -> None:
        """Spark calls this once the batch that ends at ``end`` is done (``next_offsets(end)``).

        With option ``readerName`` the processed offsets become that reader's cursor, so GC and
        retention hold what it has not read yet."""
        commit_processed(self.opts.source, next_offsets(end))

    def stop(self) -> None:
        pass
