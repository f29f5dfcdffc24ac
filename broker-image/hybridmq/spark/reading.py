"""Executor side: read one :class:`OffsetRange`, applying the ``failOnDataLoss`` policy."""

import logging
from collections.abc import Iterator, Mapping

import pyarrow as pa

from hybridmq.spark.ranges import OffsetRange
from hybridmq.spark.source import DataLossError, PartitionGoneError, PartitionSource, open_source

log = logging.getLogger("hybridmq.spark")

_sources: dict[tuple[tuple[str, str], ...], PartitionSource] = {}


def cached_source(options: Mapping[str, str]) -> PartitionSource:
    """One source per worker process and option set (Python workers are reused across tasks)."""
    key = tuple(sorted(options.items()))
    source = _sources.get(key)
    if source is None:
        source = _sources[key] = open_source(options)
    return source


def read_range(
    source_options: Mapping[str, str],
    part: OffsetRange,
    columns: tuple[str, ...],
    fail_on_data_loss: bool,
    dictionaries: bool = False,
) -> Iterator[pa.RecordBatch]:
    source = cached_source(source_options)
    try:
        try:
            yield from source.read_range(part.partition, part.start, part.end, columns, dictionaries)
        except DataLossError as err:
            if fail_on_data_loss:
                raise
            log.warning("%s; reading from %d (failOnDataLoss=false)", err, err.available)
            if err.available < part.end:
                yield from source.read_range(part.partition, err.available, part.end, columns, dictionaries)
    except PartitionGoneError:
        if fail_on_data_loss:
            raise RuntimeError(
                f"partition {part.partition} is gone: offsets [{part.start}, {part.end}) were not read"
                " (set failOnDataLoss=false to skip them)"
            ) from None
        log.warning(
            "partition %s is gone; skipping offsets [%d, %d) (failOnDataLoss=false)",
            part.partition,
            part.start,
            part.end,
        )
