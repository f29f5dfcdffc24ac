"""Offset specifications and offset arithmetic, as in Spark's Kafka source.

An offset map is ``{partition: next offset to read}`` (JSON in the checkpoint). A specification
(``startingOffsets`` / ``endingOffsets``) is ``"earliest"``, ``"latest"`` or a JSON object
``{"partition": offset}`` where ``-2`` means earliest and ``-1`` latest. Partitions a JSON spec does
not name start at earliest and end at latest.
"""

import json
from collections.abc import Mapping, Sequence

from hybridmq.spark.source import PartitionInfo

EARLIEST = -2
LATEST = -1

OffsetMap = dict[str, int]


def parse_spec(text: str | None, default: int) -> int | dict[str, int]:
    """``None`` -> ``default`` sentinel; ``earliest``/``latest`` -> sentinel; JSON -> dict."""
    if text is None or not text.strip():
        return default
    value = text.strip()
    if value.lower() == "earliest":
        return EARLIEST
    if value.lower() == "latest":
        return LATEST
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        raise ValueError(f"offsets must be 'earliest', 'latest' or a JSON object, got {text!r}") from None
    if not isinstance(parsed, dict) or not all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= LATEST - 1
        for k, v in parsed.items()
    ):
        raise ValueError(f"offsets JSON must map partition names to offsets (>= -2), got {text!r}")
    return {str(k): int(v) for k, v in parsed.items()}


def resolve(spec: int | Mapping[str, int], partitions: Sequence[PartitionInfo], default: int) -> OffsetMap:
    """Turn a specification into concrete offsets for the partitions that exist now."""
    resolved: OffsetMap = {}
    for info in partitions:
        wanted = spec if isinstance(spec, int) else spec.get(info.name, default)
        if wanted == EARLIEST:
            resolved[info.name] = info.start
        elif wanted == LATEST:
            resolved[info.name] = info.end
        else:
            resolved[info.name] = wanted
    return resolved


def limit_advance(start: Mapping[str, int], available: Mapping[str, int], max_records: int) -> OffsetMap:
    """Advance from ``start`` towards ``available`` by at most ``max_records`` offsets in total.

    The budget is shared fairly (water filling: small backlogs are served whole, the rest split
    evenly among the larger ones), in partition-name order for determinism.
    """
    backlog = {p: max(0, end - start.get(p, 0)) for p, end in available.items()}
    order = sorted(backlog, key=lambda p: (backlog[p], p))
    remaining = max(0, max_records)
    taken: dict[str, int] = {}
    for i, name in enumerate(order):
        share = remaining // (len(order) - i)
        take = min(backlog[name], share)
        taken[name] = take
        remaining -= take
    # Integer division may leave budget unused while backlogs remain: hand it out one by one.
    for name in sorted(order):
        if remaining <= 0:
            break
        extra = min(backlog[name] - taken[name], remaining)
        taken[name] += extra
        remaining -= extra
    return {p: start.get(p, 0) + taken[p] for p in available}


def dumps(offsets: Mapping[str, int]) -> str:
    return json.dumps(dict(sorted(offsets.items())))
