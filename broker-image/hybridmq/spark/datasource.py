"""The ``hybridmq`` Python data source (Spark 4 Python Data Source API): batch and streaming reads.

Register and read::

    from hybridmq.spark.datasource import HybridMQDataSource
    spark.dataSource.register(HybridMQDataSource)
    df = spark.read.format("hybridmq").option("path", "/exports/run-1").load()
    stream = (spark.readStream.format("hybridmq").option("bootstrap", "127.0.0.1:7000")
              .option("maxRecordsPerBatch", 100_000).load())

Options are documented in :mod:`hybridmq.spark.options`. Each broker partition (or each
``offsetsPerSplit`` slice of it) becomes one Spark input partition whose rows arrive in offset
order. Streaming offsets are ``{partition: next offset}``; a partition missing from a start offset
map (one that appeared after it) is read from offset 0, so a restarted query replays exactly the
checkpointed ``[start, end)`` ranges.
"""

import logging
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

from hybridmq.spark.offsets import EARLIEST, LATEST, OffsetMap, limit_advance, resolve
from hybridmq.spark.options import ReaderOptions
from hybridmq.spark.ranges import OffsetRange, plan_ranges
from hybridmq.spark.reader_cursor import commit_processed
from hybridmq.spark.reading import read_range
from hybridmq.spark.schema import parse_columns, spark_ddl
from hybridmq.spark.source import PartitionInfo, open_source

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


class HybridMQBatchReader(DataSourceReader):
    def __init__(self, opts: ReaderOptions) -> None:
        self.opts = opts

    def partitions(self) -> list[InputPartition]:
        infos = _list(self.opts)
        starting = resolve(self.opts.starting, infos, EARLIEST)
        ending = resolve(self.opts.ending, infos, LATEST)
        spans = [(p.name, p.type, starting[p.name], min(ending[p.name], p.end)) for p in infos]
        return list(plan_ranges(spans, self.opts.offsets_per_split))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, OffsetRange):
            return iter(())  # Spark plans one empty InputPartition when partitions() is empty
        return read_range(self.opts.source, partition, self.opts.columns, self.opts.fail_on_data_loss)


class HybridMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader. Lives in one driver-side Python process for the whole query run."""

    def __init__(self, opts: ReaderOptions) -> None:
        self.opts = opts
        self._types: dict[str, str] = {}
        self._last_seen_end: dict[str, int] = {}
        self._available_now: OffsetMap | None = None

    # -- offsets -----------------------------------------------------------------------------
    def _refresh(self) -> list[PartitionInfo]:
        infos = _list(self.opts)
        for info in infos:
            self._types[info.name] = info.type
            self._last_seen_end[info.name] = info.end
        return infos

    def initialOffset(self) -> dict:
        return resolve(self.opts.starting, self._refresh(), EARLIEST)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_records_per_batch is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.opts.max_records_per_batch)

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = {p.name: p.end for p in self._refresh()}

    def reportLatestOffset(self) -> dict | None:
        return {p.name: p.end for p in self._refresh()}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        known_before = dict(self._last_seen_end)
        infos = self._refresh()
        listed = {p.name: p for p in infos}
        self._check_gone(start, listed, known_before)
        ending = None if self.opts.ending == LATEST else resolve(self.opts.ending, infos, LATEST)
        from_offsets: OffsetMap = {}
        available: OffsetMap = {}
        for info in infos:
            begin = int(start[info.name]) if info.name in start else info.start
            cap = info.end
            if ending is not None:
                cap = min(cap, ending[info.name])
            if self._available_now is not None:
                if info.name not in self._available_now:
                    continue  # appeared after the availableNow target was fixed
                cap = min(cap, self._available_now[info.name])
            if info.end < begin:
                self._data_loss(f"partition {info.name} ends at {info.end}, before offset {begin}")
            from_offsets[info.name] = begin
            available[info.name] = max(begin, cap)
        if isinstance(limit, ReadMaxRows):
            end = limit_advance(from_offsets, available, limit.max_rows)
        else:
            end = available
        # A partition not in `start` is read from 0 by partitions(); keep `start`'s own entries
        # for listed partitions only (gone ones are dropped, as Kafka drops deleted partitions).
        return {name: (end[name] if name in end else int(start.get(name, 0))) for name in sorted(end)}

    def _check_gone(self, start: dict, listed: dict[str, PartitionInfo], known: dict[str, int]) -> None:
        for name, offset in start.items():
            if name in listed:
                continue
            last_end = known.get(name)
            if last_end is not None and int(offset) < last_end:
                self._data_loss(f"partition {name} is gone with offsets [{offset}, {last_end}) not read")
            else:
                log.info("partition %s is gone (read up to %s)", name, offset)
            self._last_seen_end.pop(name, None)

    def _data_loss(self, message: str) -> None:
        if self.opts.fail_on_data_loss:
            raise RuntimeError(f"{message} (set failOnDataLoss=false to go on)")
        log.warning("%s (failOnDataLoss=false)", message)

    # -- planning and reading ------------------------------------------------------------------
    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        if any(name not in self._types for name in end):
            self._refresh()
        spans = [
            (name, self._types.get(name, ""), int(start.get(name, 0)), int(stop))
            for name, stop in sorted(end.items())
        ]
        return list(plan_ranges(spans, self.opts.offsets_per_split))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, OffsetRange):
            return iter(())  # Spark plans one empty InputPartition when partitions() is empty
        return read_range(self.opts.source, partition, self.opts.columns, self.opts.fail_on_data_loss)

    def commit(self, end: dict) -> None:
        commit_processed(self.opts.source, end)  # option readerName: hold what is not read yet

    def stop(self) -> None:
        pass
