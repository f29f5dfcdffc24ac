"""Failure domains: whether each fixed partition's replicas are spread over them, and moving a
replica so that they are.

An MM's domain is the value of ``messageManagers.topologyKey`` on its node (``MessageManager.domain``).
Placement already prefers an unused domain for every new backup (``placement.pick_backups``); this
module repairs placements made before the domains were known or while too few were available:

1. a fixed partition whose replicas are all in sync but share a domain while an eligible MM of an
   unused domain exists gets that MM as an extra backup (at most ``MAX_RESPREADING`` partitions at
   a time, so that catching up does not flood the MMs);
2. ``scaling.trim_extra`` waits until it is in sync, then removes a replica of the shared domain.

``domain_spread`` tells the operator what the BrokerCluster status says about it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from hybridmq.api.resources import PartitionType
from hybridmq.planner.draft import Context, Draft
from hybridmq.planner.placement import Load, pick_backups
from hybridmq.planner.state import ClusterState, natural_key

__all__ = [
    "MAX_RESPREADING",
    "DomainSpread",
    "awaiting_spread",
    "domain_spread",
    "respread",
    "shares_domain",
]

# Fixed partitions that may carry an extra backup for the sake of their spread at any one time.
MAX_RESPREADING = 16


def shares_domain(mm: str, replicas: Sequence[str], domains: Mapping[str, str | None]) -> bool:
    """Whether another of ``replicas`` is in ``mm``'s (known) failure domain."""
    own = domains.get(mm)
    return own is not None and any(r != mm and domains.get(r) == own for r in replicas)


def _spread(replicas: Sequence[str], domains: Mapping[str, str | None]) -> bool:
    return not any(shares_domain(r, replicas, domains) for r in replicas)


def awaiting_spread(draft: Draft, ctx: Context) -> bool:
    """An extra backup placed to spread the partition is still catching up: trim nothing yet."""
    reps = draft.replicas
    return any(
        r not in draft.in_sync and ctx.domains.get(r) is not None and not shares_domain(r, reps, ctx.domains)
        for r in reps
    ) and any(r in draft.in_sync and shares_domain(r, reps, ctx.domains) for r in reps)


def _respread_one(draft: Draft, ctx: Context, load: Load) -> bool:
    if draft.type != PartitionType.FIXED or draft.deleting or draft.draining:
        return False
    if draft.primary is None or not ctx.is_alive(draft.primary) or len(draft.replicas) != draft.target:
        return False
    if any(r in ctx.leaving or r not in draft.in_sync for r in draft.replicas):
        return False  # an evacuation or a catch-up first
    domains = [ctx.domains.get(r) for r in draft.replicas]
    if None in domains or _spread(draft.replicas, ctx.domains):
        return False
    fresh = [mm for mm in ctx.eligible if (d := ctx.domains.get(mm)) is not None and d not in domains]
    if not fresh:
        return False
    (new,) = pick_backups(1, fresh, load, exclude=set(draft.replicas), primary=draft.primary)
    shared = sorted(r for r in draft.replicas if shares_domain(r, draft.replicas, ctx.domains))
    draft.replicas.append(new)
    load.add(new)
    draft.event(
        "ReplicaPlaced",
        f"added backup {new} (failure domain {ctx.domains.get(new)}): {', '.join(shared)} share the "
        f"domain {ctx.domains.get(shared[0])}; one of them is removed once {new} is in sync",
    )
    return True


def respread(drafts: Iterable[Draft], ctx: Context, load: Load, limit: int = MAX_RESPREADING) -> None:
    """Give fixed partitions whose replicas share a domain a backup in an unused one (see above)."""
    drafts = list(drafts)
    busy = sum(1 for d in drafts if d.type == PartitionType.FIXED and awaiting_spread(d, ctx))
    for d in drafts:
        if busy >= limit:
            return
        if _respread_one(d, ctx, load):
            busy += 1


@dataclass(frozen=True, slots=True)
class DomainSpread:
    """Whether every fixed partition's replicas are in different failure domains, and why not."""

    spread: bool
    reason: str  # Spread | DomainsUnknown | ReplicasShareDomain | NotEnoughDomains
    message: str
    partitions: tuple[str, ...] = ()  # fixed partitions whose replicas are not spread


def _shown(names: Sequence[str]) -> str:
    return ", ".join(names[:5]) + (" …" if len(names) > 5 else "")


def domain_spread(state: ClusterState) -> DomainSpread:
    """The ``ReplicasSpreadAcrossDomains`` verdict on ``state`` (pure)."""
    key = state.spec.message_managers.topology_key
    domains = {m.name: m.domain for m in state.message_managers}
    live = {m.domain for m in state.message_managers if m.alive and m.domain is not None}
    unknown: set[str] = set()
    apart: list[str] = []
    short: list[str] = []
    for info in state.partitions:
        st = info.status
        if info.deleting or info.spec.type != PartitionType.FIXED or st is None or not st.replicas:
            continue
        unknown.update(r for r in st.replicas if domains.get(r) is None)
        if _spread(st.replicas, domains):
            continue
        # Could the planner spread it over the domains that are up?
        (apart if len(live) >= min(len(st.replicas), info.spec.replicas) else short).append(info.name)
    not_spread = tuple(sorted([*apart, *short], key=natural_key))
    if unknown:
        mms = sorted(unknown, key=natural_key)
        return DomainSpread(
            False,
            "DomainsUnknown",
            f"no {key} label known for message managers holding replicas: {_shown(mms)} (pod not "
            "scheduled yet, or its node lacks the label)",
            not_spread,
        )
    if apart:
        return DomainSpread(
            False,
            "ReplicasShareDomain",
            f"{len(not_spread)} fixed partitions have replicas sharing a failure domain ({key}) "
            f"although {len(live)} domains are up; replicas are being moved: {_shown(not_spread)}",
            not_spread,
        )
    if short:
        return DomainSpread(
            False,
            "NotEnoughDomains",
            f"only {len(live)} failure domains ({key}) are up for the replicas of {len(short)} fixed "
            f"partitions, which share one (still on different message managers): {_shown(not_spread)}",
            not_spread,
        )
    return DomainSpread(
        True,
        "Spread",
        f"the replicas of every fixed partition are in different failure domains ({key}; {len(live)} up)",
    )
