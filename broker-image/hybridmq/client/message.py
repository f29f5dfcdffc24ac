"""Client-side message and ack types, and the records-blob codec (only clients decode records)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import msgpack


class Ack(NamedTuple):
    partition: str
    offset: int


@dataclass(slots=True)
class Message:
    destination: str
    value: bytes
    key: bytes | None
    headers: dict[str, Any] | None
    timestamp_ms: int
    partition: str
    offset: int
    redelivered: bool = False
    attributes: dict[str, Any] = field(default_factory=dict)
    batch_base: int = -1  # the first offset of the delivery that brought it
    # How often it has been handed out, this time included (> 1: ``redelivered``; queues and
    # durable subscriptions count across failovers and consumer crashes).
    delivery_count: int = 1

    @property
    def id(self) -> str:
        """Cluster-unique message id: ``<partition>:<offset>``."""
        return f"{self.partition}:{self.offset}"


def now_ms() -> int:
    return int(time.time() * 1000)


def pack_records(records: list[tuple[Any, ...]]) -> bytes:
    """Records are ``[value, key, headers, timestamp_ms]``; the whole batch is one msgpack blob."""
    return msgpack.packb(records, use_bin_type=True)


def unpack_records(blob: bytes) -> list[list[Any]]:
    records = msgpack.unpackb(blob, raw=False, use_list=True)
    if not isinstance(records, list):
        raise ValueError("records blob is not an array")
    return records
