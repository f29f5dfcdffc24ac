"""The streaming offset of the ``hybridmq`` source: what a checkpoint remembers of each partition.

JSON, one entry per partition::

    {"od-0": {"offset": 40, "end": 50, "incarnation": "9f2c..."}, ...}

``offset`` is the next offset to read. ``end`` is the partition's end when it was last listed
(never beyond what the query means to read: ``endingOffsets`` or an availableNow target), and
``incarnation`` tells a partition deleted and re-created under the same name from the one that was
read. With both, a restarted query knows exactly which records of a partition that vanished while it
was stopped were never read.

Checkpoints written before (``{"od-0": 40}``) are read as ``offset`` = ``end`` = 40 with an unknown
incarnation.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Position:
    offset: int  # next offset to read
    end: int  # the partition's end as last seen (>= offset)
    incarnation: str | None = None

    def same_partition(self, incarnation: str | None) -> bool:
        """False only when both incarnations are known and differ (deleted and re-created)."""
        return self.incarnation is None or incarnation is None or self.incarnation == incarnation


Positions = dict[str, Position]


def decode(offset: Mapping[str, Any]) -> Positions:
    positions: Positions = {}
    for name, value in offset.items():
        if isinstance(value, Mapping):
            start = int(value["offset"])
            end = max(start, int(value.get("end", start)))
            incarnation = value.get("incarnation")
            positions[str(name)] = Position(start, end, None if incarnation is None else str(incarnation))
        else:  # a checkpoint written before positions remembered ends
            positions[str(name)] = Position(int(value), int(value))
    return positions


def encode(positions: Mapping[str, Position]) -> dict[str, Any]:
    """Deterministic (sorted) so that equal positions serialize to the same JSON."""
    out: dict[str, Any] = {}
    for name in sorted(positions):
        pos = positions[name]
        entry: dict[str, Any] = {"offset": pos.offset, "end": max(pos.end, pos.offset)}
        if pos.incarnation is not None:
            entry["incarnation"] = pos.incarnation
        out[name] = entry
    return out


def next_offsets(offset: Mapping[str, Any]) -> dict[str, int]:
    """``{partition: next offset to read}`` of a streaming offset (either JSON shape)."""
    return {name: pos.offset for name, pos in decode(offset).items()}
