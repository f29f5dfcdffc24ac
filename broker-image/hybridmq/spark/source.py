"""The partition-reader seam: what the data source needs from wherever the records live.

Two implementations: :mod:`hybridmq.spark.exported` (a directory written by
:mod:`hybridmq.spark.export`) and :mod:`hybridmq.spark.live` (a running cluster through
``hybridmq.client``). :func:`open_source` picks one from the data source options, so that both the
driver (listing partitions) and the executors (reading ranges) build their own from plain options.
"""

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa


@dataclass(frozen=True)
class PartitionInfo:
    """One partition as listed now: records live at offsets in ``[start, end)``."""

    name: str
    type: str  # "fixed" | "on-demand"
    start: int  # earliest offset still stored (log start)
    end: int  # next offset to be written (exclusive end, the high watermark)
    # Changes when the partition is deleted and re-created under the same name (None: unknown).
    incarnation: str | None = None


class PartitionGoneError(Exception):
    """The partition no longer exists (an on-demand partition that was garbage collected)."""


class DataLossError(Exception):
    """Part of the requested range is no longer stored (trimmed or deleted before it was read)."""

    def __init__(self, partition: str, requested: int, available: int) -> None:
        super().__init__(f"partition {partition}: offsets [{requested}, {available}) are no longer stored")
        self.partition = partition
        self.requested = requested
        self.available = available


class PartitionSource(Protocol):
    def list_partitions(self) -> list[PartitionInfo]:
        """Every partition that exists now, sorted by name."""
        ...

    def read_range(
        self,
        partition: str,
        start: int,
        end: int,
        columns: Sequence[str],
        dictionaries: bool = False,
    ) -> Iterator[pa.RecordBatch]:
        """Batches of the records at offsets in ``[start, end)``, in offset order.

        Each batch has exactly ``schema.arrow_schema(columns)``, except that with
        ``dictionaries=True`` string columns may come dictionary-encoded (cheaper to check). Raises
        :class:`PartitionGoneError` if the partition does not exist and :class:`DataLossError`
        (before yielding anything) if ``start`` is below the partition's log start; the caller
        decides whether that is fatal.
        """
        ...

    def close(self) -> None: ...


def open_source(options: Mapping[str, str]) -> PartitionSource:
    """``path`` selects an exported log; ``bootstrap`` (host:port of a CM) a live cluster."""
    path = options.get("path")
    bootstrap = options.get("bootstrap")
    if path and bootstrap:
        raise ValueError("give either 'path' (an exported log) or 'bootstrap' (a cluster), not both")
    if path:
        from hybridmq.spark.exported import ExportedLogSource

        return ExportedLogSource(path)
    if bootstrap:
        from hybridmq.spark.live import LiveClusterSource

        return LiveClusterSource.from_options(options)
    raise ValueError("the hybridmq data source needs option 'path' (exported log) or 'bootstrap'")
