"""Offset specifications and offset arithmetic, as in Spark's Kafka source.

An offset map is ``{partition: next offset to read}`` (JSON in the checkpoint). A specification
(``startingOffsets`` / ``endingOffsets``) is ``"earliest"``, ``"latest"`` or a JSON object
``{"partition": offset}`` where ``-2`` means earliest and ``-1`` latest. Partitions a JSON spec does
not name start at earliest and end at latest.
"""

import json
from collections.abc import Mapping, Sequence
from typing import Any

from hybridmq.spark.source import PartitionInfo

EARLIEST = -2
LATEST = -1

OffsetMap = dict[str, int]


def parse_spec(option: str, text: str | None, default: int) -> int | dict[str, int]:
    """``None`` -> ``default`` sentinel; ``earliest``/``latest`` -> sentinel; JSON -> dict."""
    if text is None or not text.strip():
        return default
    value = text.strip()
    if value.lower() == "earliest":
        return EARLIEST
    if value.lower() == "latest":
        return LATEST
    parsed = _json_object(option, text, "'earliest', 'latest' or a JSON object")
    if not all(_is_int(v) and v >= EARLIEST for v in parsed.values()):
        raise ValueError(f"option {option}: offsets must be integers >= -2, got {text!r}")
    return {str(k): int(v) for k, v in parsed.items()}


def parse_timestamps(option: str, text: str | None) -> dict[str, int] | None:
    """``{"partition": epoch milliseconds}`` or ``None`` when not given."""
    if text is None or not text.strip():
        return None
    parsed = _json_object(option, text, 'a JSON object {"partition": epoch milliseconds}')
    if not all(_is_int(v) and v >= 0 for v in parsed.values()):
        raise ValueError(f"option {option}: timestamps must be epoch milliseconds >= 0, got {text!r}")
    return {str(k): int(v) for k, v in parsed.items()}


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _json_object(option: str, text: str, expected: str) -> dict[str, Any]:
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        raise ValueError(f"option {option}: expected {expected}, got {text!r}") from None
    if not isinstance(parsed, dict):
        raise ValueError(f"option {option}: expected {expected}, got {text!r}")
    return parsed


def check_named(option: str, spec: object, partitions: Sequence[PartitionInfo]) -> None:
    """Refuse a JSON spec that names a partition the query does not read."""
    if not isinstance(spec, Mapping):
        return
    known = {p.name for p in partitions}
    unknown = sorted(set(spec) - known)
    if unknown:
        raise ValueError(
            f"option {option} names partition(s) {unknown} that the query does not read;"
            f" it reads {sorted(known)}"
        )


def check_within(option: str, offsets: Mapping[str, int], partitions: Sequence[PartitionInfo]) -> None:
    """Refuse an offset past a partition's end (nothing is there, and may never be)."""
    for info in partitions:
        if offsets.get(info.name, info.end) > info.end:
            raise ValueError(
                f"option {option}: offset {offsets[info.name]} of partition {info.name} is past its end"
                f" {info.end}"
            )


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
