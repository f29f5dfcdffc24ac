"""``Degraded``: the cluster serves, but with less redundancy than asked for.

Counted per partition: fewer in-sync copies than its minInSync (its writes are refused), or fewer
than its replica count (capped at the MM count asked for: more copies than MMs cannot exist).
"""

from collections.abc import Sequence

from hybridmq_operator.conditions.model import ClusterObservation, Condition, PartitionObservation

TYPE = "Degraded"
SHOWN = 5


def _listed(parts: Sequence[PartitionObservation], wanted: dict[str, int]) -> str:
    ordered = sorted(parts, key=lambda p: p.name)
    shown = ", ".join(f"{p.name} ({len(p.in_sync)}/{wanted[p.name]})" for p in ordered[:SHOWN])
    return shown + (" …" if len(ordered) > SHOWN else "")


def evaluate(obs: ClusterObservation) -> Condition:
    reasons: list[str] = []
    if obs.lost_mms:
        reasons.append("lost MMs: " + ", ".join(sorted(obs.lost_mms)))
    serving = [p for p in obs.partitions if p.state in ("Active", "Migrating")]
    below = [p for p in serving if len(p.in_sync) < p.min_in_sync]
    if below:
        need = {p.name: p.min_in_sync for p in below}
        listed = _listed(below, need)
        reasons.append(f"{len(below)} partitions below minInSync, writes refused (in sync/needed): {listed}")
    cap = max(obs.mm_desired, 1)
    wanted = {p.name: min(p.desired_replicas, cap) for p in serving}
    under = [p for p in serving if len(p.in_sync) < wanted[p.name] and p not in below]
    if under:
        reasons.append(
            f"{len(under)} partitions under-replicated (in sync/replicas): {_listed(under, wanted)}"
        )
    if obs.cm_ready < obs.cm_desired or obs.mm_ready < obs.mm_desired:
        reasons.append(f"brokers ready CM {obs.cm_ready}/{obs.cm_desired} MM {obs.mm_ready}/{obs.mm_desired}")
    for mm, size in obs.oversize_reports:
        reasons.append(
            f"{mm}'s report ({size} bytes) exceeds the Lease annotation limit: its figures are stale"
        )
    if reasons:
        reason = "BelowMinInSync" if below else "ReducedRedundancy"
        return Condition(TYPE, True, reason, "; ".join(reasons))
    return Condition(TYPE, False, "FullRedundancy", "every partition has all its in-sync replicas")
