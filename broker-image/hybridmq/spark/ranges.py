"""Input partitions: one broker partition's offset range ``[start, end)``, optionally split."""

from collections.abc import Iterable

from pyspark.sql.datasource import InputPartition


class OffsetRange(InputPartition):
    """Picklable description of one Spark task's work."""

    def __init__(self, partition: str, partition_type: str, start: int, end: int) -> None:
        super().__init__((partition, start, end))
        self.partition = partition
        self.partition_type = partition_type
        self.start = start
        self.end = end

    def __repr__(self) -> str:
        return f"OffsetRange({self.partition!r}, {self.partition_type!r}, {self.start}, {self.end})"


def plan_ranges(
    spans: Iterable[tuple[str, str, int, int]], offsets_per_split: int | None
) -> list[OffsetRange]:
    """``(partition, type, start, end)`` spans -> non-empty ranges, split every ``offsets_per_split``."""
    ranges: list[OffsetRange] = []
    for name, ptype, start, end in spans:
        if end <= start:
            continue
        step = offsets_per_split or (end - start)
        for lo in range(start, end, step):
            ranges.append(OffsetRange(name, ptype, lo, min(lo + step, end)))
    return ranges
