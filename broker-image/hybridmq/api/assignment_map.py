"""The assignment map: a failover's new partition statuses in one object, written in one request.

A lost MM may lead a thousand partitions; writing a thousand Partition statuses takes the API
server seconds, so the operator first commits every primary change of a round into one ConfigMap
(``<cluster>-assignments``, key ``assignments.json``) that every broker watches, and the Partition
statuses follow. Each entry holds the assignment part of the partition's new status (state, epoch,
primary, replicas, in-sync set, failover record; not the reported figures) and the Partition's uid
(a re-created Partition of the same name never picks up an old entry). An entry counts only while
its epoch is higher than the Partition status's: once the Partition caught up, the Partition wins.

The map also carries a lost MM's removal from the in-sync sets of the partitions it was a backup
of: their primaries cannot acknowledge until it is out (the high watermark waits for every in-sync
replica), and that change keeps the epoch. Such an entry names the Partition's resourceVersion it
was planned on and counts only while the Partition is still at it: any later change to the
Partition (the operator's status write first of all) makes the Partition win again. Falling back
to a Partition that had not caught up is safe: its in-sync set is the larger one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from hybridmq.api.resources import PartitionStatus

DATA_KEY = "assignments.json"
FORMAT_VERSION = 1
# What a broker acts on and what the Partition status must carry after a failover; the reported
# figures (offsets, backlog, conditions) come back with the next MM reports.
ASSIGNED_FIELDS = frozenset(
    {"state", "epoch", "primary", "replicas", "in_sync", "accept_writes", "drained_since", "last_failover"}
)
# A ConfigMap holds at most 1 MiB; past this the operator writes the Partition statuses only.
MAX_BYTES = 900 * 1024


def configmap_name(cluster: str) -> str:
    return f"{cluster}-assignments"


@dataclass(frozen=True, slots=True)
class MapEntry:
    """The committed assignment of one Partition (identified by name and uid); ``resource_version``:
    the Partition's when the entry was planned ("": not known, the entry counts by its epoch only)."""

    uid: str
    status: PartitionStatus
    resource_version: str = ""

    @classmethod
    def of(cls, uid: str, status: PartitionStatus, resource_version: str = "") -> MapEntry:
        """The entry of a full status (only its assignment part is kept)."""
        kept = PartitionStatus.model_validate(status.model_dump(include=set(ASSIGNED_FIELDS)))
        return cls(uid, kept, resource_version)

    def applied_to(self, status: PartitionStatus | None) -> PartitionStatus:
        """``status`` (a Partition's, possibly older) with this entry's assignment fields."""
        base = status or PartitionStatus()
        return base.model_copy(update={f: getattr(self.status, f) for f in ASSIGNED_FIELDS})


class AssignmentMapError(ValueError):
    """The map's text is not a map this version understands."""


def encode(entries: Mapping[str, MapEntry]) -> str:
    """Compact JSON: defaults left out (the status model fills them back in)."""
    body = {
        "version": FORMAT_VERSION,
        "partitions": {
            name: {
                "uid": e.uid,
                **({"resourceVersion": e.resource_version} if e.resource_version else {}),
                "status": e.status.model_dump(
                    mode="json", by_alias=True, include=set(ASSIGNED_FIELDS), exclude_defaults=True
                ),
            }
            for name, e in sorted(entries.items())
        },
    }
    return json.dumps(body, separators=(",", ":"))


def decode(text: str | None) -> dict[str, MapEntry]:
    """The entries of a map's text (empty or missing text: no entries)."""
    if not text:
        return {}
    try:
        body = json.loads(text)
    except ValueError as exc:
        raise AssignmentMapError(f"assignment map is not JSON: {exc}") from exc
    if not isinstance(body, dict) or body.get("version") != FORMAT_VERSION:
        raise AssignmentMapError(f"assignment map version {_version(body)!r} is not {FORMAT_VERSION}")
    raw = body.get("partitions")
    if not isinstance(raw, dict):
        raise AssignmentMapError("assignment map has no 'partitions' object")
    out: dict[str, MapEntry] = {}
    for name, item in raw.items():
        if not isinstance(item, dict) or not isinstance(item.get("uid"), str):
            raise AssignmentMapError(f"assignment map entry {name!r} has no uid")
        try:
            status = PartitionStatus.model_validate(item.get("status") or {})
        except ValidationError as exc:
            raise AssignmentMapError(f"assignment map entry {name!r}: {exc}") from exc
        rv = item.get("resourceVersion", "")
        if not isinstance(rv, str):
            raise AssignmentMapError(f"assignment map entry {name!r}: resourceVersion is not a string")
        out[str(name)] = MapEntry(item["uid"], status, rv)
    return out


def _version(body: Any) -> Any:
    return body.get("version") if isinstance(body, dict) else None


def ahead(entry: MapEntry | None, uid: str | None, epoch: int, resource_version: str | None = None) -> bool:
    """Whether ``entry`` is newer than a Partition (``uid``, at ``resource_version``) whose status
    has ``epoch``: a higher epoch, or the same one planned on this very version of the Partition."""
    if entry is None or not uid or entry.uid != uid:
        return False
    if entry.status.epoch != epoch:
        return entry.status.epoch > epoch
    return bool(entry.resource_version) and entry.resource_version == resource_version
