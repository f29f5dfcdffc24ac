"""What an MM tells the operator with each Lease renewal (annotation ``hybridmq.io/report``).

The operator is the only writer of ``Partition.status``; the MMs feed it through their own Lease:
the partitions they hold on disk and, for each, their role, epoch and log end offset, and, from a
primary, its in-sync set, high watermark, backlog, attached producers and how far its named readers
are behind. The operator turns these into ``PartitionStatus`` figures, uses the offsets to promote
the in-sync replica with the longest log, and releases a Partition's finalizer once no live MM
reports holding it.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

REPORT_ANNOTATION = "hybridmq.io/report"
# Set instead of the report when the report would not fit (its size in bytes): the API server
# refuses an object whose annotations exceed 256 KiB, and a refused renewal would fence the MM.
REPORT_OVERSIZE_ANNOTATION = "hybridmq.io/report-oversize"
# Room left for the other annotations and the Lease itself.
MAX_REPORT_BYTES = 200 * 1024


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, serialize_by_alias=True, extra="ignore"
    )


class PartitionReport(_Model):
    role: str = Field(default="backup", description="primary or backup")
    epoch: int = Field(default=0, ge=0)
    log_end_offset: int = Field(default=0, ge=0)
    # Only meaningful from the primary:
    committed_offset: int = Field(default=0, ge=0)
    in_sync: list[str] = Field(default_factory=list)
    backlog: int = Field(default=0, ge=0)
    producers: int = Field(default=0, ge=0)
    # Records the furthest-behind named reader cursor (a stream reader) has not committed yet.
    reader_lag: int = Field(default=0, ge=0)


class MMReport(_Model):
    """Everything one MM holds; ``partitions`` lists every partition with data on its volume."""

    partitions: dict[str, PartitionReport] = Field(default_factory=dict)
    # The MM was asked to stop (SIGTERM) and waits for its replicas to move before it exits: the
    # graceful handoff request, carried by what the operator (or local controller) already reads.
    stopping: bool = False

    def to_annotation(self) -> str:
        return json.dumps(self.compact(), separators=(",", ":"), sort_keys=True)

    def compact(self) -> dict[str, Any]:
        """The JSON form without default values (a backup's entry is its epoch and log end): the
        report grows by tens of bytes per partition, not hundreds. Readers fill the defaults in,
        so fields can be added without breaking older operators."""
        return self.model_dump(mode="json", exclude_defaults=True)

    @classmethod
    def from_annotation(cls, text: str | None) -> MMReport | None:
        if not text:
            return None
        try:
            return cls.model_validate_json(text)
        except ValidationError:
            return None


def decision_key(compact: Any) -> Any:
    """The part of a report (its ``compact()`` form) the operator's decisions depend on: which
    partitions the MM holds, its role and epoch in each, a primary's in-sync set, whether the
    partition is empty, unattended and read to its end, and the stop request. A report that
    changed only in offsets and figures has the same key."""
    if not isinstance(compact, dict):
        return None
    parts = compact.get("partitions") or {}
    return (
        bool(compact.get("stopping")),
        tuple(
            sorted(
                (
                    str(name),
                    p.get("role", "backup"),
                    p.get("epoch", 0),
                    tuple(p.get("inSync") or ()),
                    not p.get("backlog"),
                    not p.get("producers"),
                    not p.get("readerLag"),
                )
                for name, p in parts.items()
                if isinstance(p, dict)
            )
        ),
    )
