"""The BrokerCluster's failover history: a pure function from one round's primary changes to the
bounded list ``status.failovers`` (newest first) that ``kubectl describe hbc`` shows.

One entry per MM whose primaries moved: a **failover** (the MM was lost) or a **handoff** (it was
stopping, see ``planner/scaling.py``). ``detectedAt`` is when the loss (or the stop request) was first
seen, ``completedAt`` the round in which every partition it led had a new primary (one left without
a primary, when no in-sync copy was alive: once one came back and took it), and
``durationSeconds`` the difference. A failover planned over several rounds (thousands of
partitions) updates its entry instead of adding one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Literal

from hybridmq.api.resources import MAX_FAILOVER_HISTORY, ClusterFailover, FailoverRecord, PartitionStatus

HANDOFF_PREFIX = "graceful handoff"
# A later round's records for the same MM within this time belong to the same entry.
SAME_EVENT = timedelta(seconds=30)


Kind = Literal["failover", "handoff"]


def kind_of(record: FailoverRecord) -> Kind:
    return "handoff" if record.reason.startswith(HANDOFF_PREFIX) else "failover"


def _parse(history: Iterable[Mapping[str, Any]]) -> list[ClusterFailover]:
    out = []
    for item in history:
        try:
            out.append(ClusterFailover.model_validate(item))
        except ValueError:
            continue  # an entry written by hand or by another version: not ours to keep
    return out


def record_round(
    history: Sequence[Mapping[str, Any]],
    records: Iterable[tuple[str, FailoverRecord]],
    now: datetime,
    stopping_since: Mapping[str, datetime] | None = None,
    led: Mapping[str, int] | None = None,
) -> list[dict[str, Any]]:
    """``history`` (the status list) with one round's primary changes added.

    ``records``: (partition, its new ``lastFailover``) written this round; ``stopping_since``: when
    each stopping MM was first seen stopping; ``led``: how many partitions each MM still leads
    after this round (a handoff or failover is complete when its MM leads none).
    """
    entries = _parse(history)
    groups: dict[tuple[str, Kind], list[FailoverRecord]] = {}
    for _name, record in records:
        groups.setdefault((record.from_ or "", kind_of(record)), []).append(record)
    for (mm, kind), recs in sorted(groups.items()):
        times = [r.time or now for r in recs]
        detected = min(t - timedelta(seconds=r.duration_seconds) for t, r in zip(times, recs, strict=True))
        if kind == "handoff" and stopping_since and mm in stopping_since:
            detected = min(detected, stopping_since[mm])
        moved = sum(1 for r in recs if r.to is not None)
        offline = len(recs) - moved
        new = ClusterFailover(kind=kind, lost=mm, reason=recs[0].reason, detected_at=detected)
        entry = next((e for e in entries if _same_event(e, new)), None)
        if entry is None:
            entry = new
            entries.insert(0, entry)
        else:
            entry.detected_at = min(entry.detected_at or detected, detected)
        entry.partitions += moved
        entry.offline += offline
        complete = offline == 0 and (led is None or led.get(mm, 0) <= 0)
        if complete:
            entry.completed_at = max(times)
            entry.duration_seconds = round(
                max(0.0, (entry.completed_at - (entry.detected_at or detected)).total_seconds()), 3
            )
    return [e.model_dump(mode="json", exclude_none=True) for e in entries[:MAX_FAILOVER_HISTORY]]


def still_led(
    statuses: Iterable[PartitionStatus | None], records: Iterable[tuple[str, FailoverRecord]]
) -> Counter[str]:
    """How many partitions each MM leads after a round (``led`` of ``record_round``): the
    partitions' statuses before the round, less the primaries the round's ``records`` moved away.
    A partition left without a primary counts against the MM it was lost from, so that MM's
    failover is complete only once the partition has a primary again."""
    led: Counter[str] = Counter()
    for st in statuses:
        if st is None:
            continue
        last = st.last_failover
        if st.primary:
            led[st.primary] += 1
        elif last is not None and last.left_offline:
            led[str(last.from_)] += 1
    led.subtract(Counter(r.from_ for _, r in records if r.from_))
    return led


def completed_in(
    before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]]
) -> list[ClusterFailover]:
    """The entries ``after`` completed that ``before`` did not have completed (for the metrics).
    An entry is the same event as in ``before`` when ``record_round`` would have merged them (same
    MM and kind, detected within ``SAME_EVENT``): a later round that extends a completed entry moves
    its detection time, and must not count the failover again."""
    done = [e for e in _parse(before) if e.duration_seconds is not None]
    return [
        e
        for e in _parse(after)
        if e.duration_seconds is not None and not any(_same_event(d, e) for d in done)
    ]


def _same_event(a: ClusterFailover, b: ClusterFailover) -> bool:
    if a.lost != b.lost or a.kind != b.kind or a.detected_at is None or b.detected_at is None:
        return False
    return abs(a.detected_at - b.detected_at) <= SAME_EVENT


def last_duration(history: Sequence[Mapping[str, Any]]) -> float | None:
    """The duration of the newest completed entry (the printer column)."""
    for entry in history:
        if entry.get("durationSeconds") is not None:
            return float(entry["durationSeconds"])
    return None
