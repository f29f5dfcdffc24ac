"""Replica placement: spread, never two replicas of a partition on one MM, least loaded first.

Failure domains come first: a new backup goes to an MM whose domain (``MessageManager.domain``)
none of the partition's other replicas uses, whenever one is eligible; only when every domain is
taken (fewer domains than replicas) does it share one, and then still on another MM. MMs of an
unknown domain are never preferred nor avoided for their domain.

Deterministic: ties are broken by the MMs' natural name order (``mm-2`` before ``mm-10``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence

from hybridmq.api.resources import PartitionState
from hybridmq.planner.draft import Context, Draft
from hybridmq.planner.state import natural_key

__all__ = ["Load", "fill_replicas", "pick_backups", "pick_primary", "place_new"]


class Load:
    """Replicas and primaries per MM, kept up to date as the round edits drafts."""

    def __init__(self, mms: Iterable[str] = (), domains: Mapping[str, str | None] | None = None) -> None:
        self.replicas: dict[str, int] = {}
        # MM -> failure domain (None: unknown), what placement spreads a partition's replicas over.
        self.domains: Mapping[str, str | None] = domains or {}
        self.primaries: dict[str, int] = {}
        # (primary, backup) -> partitions with that pair: spreads each MM's backups over the others,
        # so that the partitions of a lost MM fail over to many MMs rather than one.
        self.pairs: dict[tuple[str, str], int] = {}
        self._keys: dict[str, tuple[tuple[int, int | str], ...]] = {}
        for mm in mms:
            self.replicas.setdefault(mm, 0)
            self.primaries.setdefault(mm, 0)

    @classmethod
    def of(
        cls, drafts: Iterable[Draft], mms: Iterable[str] = (), domains: Mapping[str, str | None] | None = None
    ) -> Load:
        load = cls(mms, domains)
        for d in drafts:
            if d.deleting:
                continue
            for r in d.replicas:
                load.add(r, primary=r == d.primary)
                if d.primary is not None and r != d.primary:
                    load.pair(d.primary, r)
        return load

    def pair(self, primary: str, backup: str, delta: int = 1) -> None:
        key = (primary, backup)
        self.pairs[key] = max(0, self.pairs.get(key, 0) + delta)

    def add(self, mm: str, primary: bool = False) -> None:
        self.replicas[mm] = self.replicas.get(mm, 0) + 1
        if primary:
            self.primaries[mm] = self.primaries.get(mm, 0) + 1

    def remove(self, mm: str, primary: bool = False) -> None:
        self.replicas[mm] = max(0, self.replicas.get(mm, 0) - 1)
        if primary:
            self.primaries[mm] = max(0, self.primaries.get(mm, 0) - 1)

    def move_primary(self, old: str | None, new: str) -> None:
        if old is not None:
            self.primaries[old] = max(0, self.primaries.get(old, 0) - 1)
        self.primaries[new] = self.primaries.get(new, 0) + 1

    def key(self, mm: str) -> tuple[tuple[int, int | str], ...]:
        k = self._keys.get(mm)
        if k is None:
            k = self._keys[mm] = natural_key(mm)
        return k

    def primary_order(self, mm: str) -> tuple[int, int, tuple[tuple[int, int | str], ...]]:
        return (self.primaries.get(mm, 0), self.replicas.get(mm, 0), self.key(mm))

    def backup_order(
        self, mm: str, primary: str | None = None
    ) -> tuple[int, int, int, tuple[tuple[int, int | str], ...]]:
        paired = self.pairs.get((primary, mm), 0) if primary is not None else 0
        return (self.replicas.get(mm, 0), paired, self.primaries.get(mm, 0), self.key(mm))


def pick_primary(candidates: Sequence[str], load: Load, exclude: Collection[str] = ()) -> str | None:
    """The candidate with the fewest primaries (then fewest replicas, then name)."""
    choices = [c for c in candidates if c not in exclude]
    if not choices:
        return None
    return min(choices, key=load.primary_order)


def pick_backups(
    n: int,
    candidates: Sequence[str],
    load: Load,
    exclude: Collection[str] = (),
    primary: str | None = None,
    spread_from: Collection[str] | None = None,
) -> list[str]:
    """Up to ``n`` distinct candidates not in ``exclude``: first those in a failure domain that
    none of ``spread_from`` (default ``exclude``: the partition's replicas) nor an earlier pick
    uses, then fewest replicas, fewest partitions shared with ``primary``, fewest primaries, name.
    The chosen backups are recorded as paired with ``primary``; their replica load is left to the
    caller."""
    if n <= 0:
        return []
    choices = [c for c in candidates if c not in exclude]
    used = {load.domains.get(mm) for mm in (exclude if spread_from is None else spread_from)} - {None}
    chosen: list[str] = []
    while choices and len(chosen) < n:
        best = min(choices, key=lambda mm: (load.domains.get(mm) in used, load.backup_order(mm, primary)))
        choices.remove(best)
        chosen.append(best)
        if (domain := load.domains.get(best)) is not None:
            used.add(domain)
    if primary is not None:
        for b in chosen:
            load.pair(primary, b)
    return chosen


def place_new(draft: Draft, ctx: Context, load: Load, primary: str | None = None) -> bool:
    """Place an unplaced partition: a primary (least primaries) and ``target - 1`` backups.

    A new partition's log is empty everywhere, so all its replicas start in sync. Returns whether
    anything was placed (False when no MM is eligible).
    """
    first = primary if primary is not None else pick_primary(ctx.eligible, load)
    if first is None:
        return False
    backups = pick_backups(draft.target - 1, ctx.eligible, load, exclude={first}, primary=first)
    draft.primary = first
    draft.replicas = [first, *backups]
    draft.in_sync = list(draft.replicas)
    draft.replica_offsets = {}
    load.add(first, primary=True)
    for b in backups:
        load.add(b)
    if draft.state == PartitionState.PENDING:
        draft.state = PartitionState.ACTIVE
    where = ", ".join(backups) or "none"
    draft.event("Placed", f"primary {first}, backups {where} at epoch {draft.epoch}")
    return True


def fill_replicas(draft: Draft, ctx: Context, load: Load) -> None:
    """Place an unplaced partition, or add replacement backups to an under-replicated one.

    Replacement backups need a live primary to copy from and start out of sync. Draining on-demand
    partitions get no new backups (their data only waits to be consumed).
    """
    if draft.deleting or draft.state == PartitionState.DRAINED:
        return
    if not draft.placed:
        place_new(draft, ctx, load)
        return
    if draft.draining or draft.primary is None or not ctx.is_alive(draft.primary):
        return
    missing = draft.target - sum(1 for r in draft.replicas if r not in ctx.moving_off)
    if missing <= 0:
        return
    staying = [r for r in draft.replicas if r not in ctx.leaving]
    added = pick_backups(
        missing, ctx.eligible, load, exclude=set(draft.replicas), primary=draft.primary, spread_from=staying
    )
    for b in added:
        draft.replicas.append(b)
        load.add(b)
    if added:
        draft.event(
            "ReplicaPlaced",
            f"added backup {', '.join(added)} to restore {draft.target} replicas; it catches up from "
            f"primary {draft.primary}",
        )
