"""The assignment map: a failover's new partition statuses in one object, written in one request.

A lost MM may lead a thousand partitions; writing a thousand Partition statuses takes the API
server seconds, so the operator first commits every primary change of a round into one ConfigMap
(``<cluster>-assignments``, key ``assignments.json``) that every broker watches, and the Partition
statuses follow. Each entry holds the assignment part of the partition's new status (state, epoch,
primary, replicas, in-sync set, failover record; not the reported figures) and the Partition's uid
(a re-created Partition of the same name never picks up an old entry). An entry counts only while
its epoch is higher than the Partition status's: once the Partition caught up, the Partition wins.

The map also carries a replica's removal from an in-sync set at the same epoch (a lost MM's, from
every partition it was a backup of): the primary acknowledges nothing until the replica is out
(the high watermark waits for every in-sync replica). Such a *removal entry* names the Partition's
resourceVersion it was planned on. A broker takes it while the Partition is still at that version
(``ahead``) and its status still names the removed replica: any later write to the Partition, the
status that carries the removal first of all, makes the Partition win, and a Partition that had
not caught up only has the larger in-sync set, which makes a primary wait, never acknowledge too
early. The operator is stricter (``pending``): it plans with the removal until a Partition status
carries it, whatever else wrote the Partition, so it never promotes a replica that a primary may
have acknowledged records without. ``ahead`` is ``pending`` plus the version check, so a broker
never follows an entry the operator stopped planning with. Before a
status at that epoch names the removed replica again, the operator drops the entry from the map.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
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
    """The committed assignment of one Partition (identified by name and uid). ``resource_version``:
    set for a removal entry only (the Partition's version it was planned on); an entry without one
    raised the epoch and counts by its epoch alone."""

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


def ahead(
    entry: MapEntry | None,
    uid: str | None,
    epoch: int,
    resource_version: str | None,
    in_sync: Iterable[str],
) -> bool:
    """Whether a broker takes ``entry`` over a Partition (``uid``, at ``resource_version``) whose
    status has ``epoch`` and ``in_sync``: a higher epoch, or a removal entry planned on this very
    version that the status has not carried out (``pending``). A status whose in-sync set is
    already within the entry's wins even at that version: the operator no longer plans with the
    entry then (it may never write that Partition again), and the status may name a replica
    placed since, which a broker following the entry would leave without its copy for good."""
    if entry is None or not uid or entry.uid != uid:
        return False
    if entry.resource_version:
        return entry.resource_version == resource_version and pending(entry, uid, epoch, in_sync)
    return entry.status.epoch > epoch


def pending(entry: MapEntry | None, uid: str | None, epoch: int, in_sync: Iterable[str]) -> bool:
    """Whether the operator still plans with ``entry`` for a Partition (``uid``) whose status has
    ``epoch`` and ``in_sync``: a higher epoch, or a removal entry at that epoch whose removed
    replica the status still names (the status has not carried the removal yet)."""
    if entry is None or not uid or entry.uid != uid:
        return False
    if entry.resource_version:
        return entry.status.epoch == epoch and not set(in_sync) <= set(entry.status.in_sync)
    return entry.status.epoch > epoch
