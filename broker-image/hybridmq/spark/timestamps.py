"""``startingOffsetsByTimestamp``: the first offset of a partition stored at or after a time."""

from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa

from hybridmq.spark.source import PartitionInfo, PartitionSource

_MS_TO_US = 1000


def first_offset_at(source: PartitionSource, info: PartitionInfo, timestamp_ms: int) -> int:
    """The earliest offset whose record timestamp is >= ``timestamp_ms`` (the end when none is).

    Timestamps need not increase with offsets, so every batch is checked, two columns only.
    """
    wanted = timestamp_ms * _MS_TO_US
    for batch in source.read_range(info.name, info.start, info.end, ("offset", "timestamp")):
        stamps = batch.column("timestamp").cast(pa.int64()).fill_null(-1).to_numpy()
        hits = np.flatnonzero(stamps >= wanted)
        if len(hits):
            return int(batch.column("offset")[int(hits[0])].as_py())
    return info.end


def resolve_timestamps(
    source: PartitionSource, timestamps: Mapping[str, int], partitions: Sequence[PartitionInfo]
) -> dict[str, int]:
    return {
        p.name: first_offset_at(source, p, timestamps[p.name]) for p in partitions if p.name in timestamps
    }
