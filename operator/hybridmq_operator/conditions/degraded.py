"""``Degraded``: the cluster serves, but with less redundancy than asked for."""

from hybridmq_operator.conditions.model import ClusterObservation, Condition

TYPE = "Degraded"


def evaluate(obs: ClusterObservation) -> Condition:
    reasons: list[str] = []
    if obs.lost_mms:
        reasons.append("lost MMs: " + ", ".join(sorted(obs.lost_mms)))
    under = sorted(
        p.name
        for p in obs.partitions
        if p.state in ("Active", "Migrating")
        and len(p.in_sync) < min(p.desired_replicas, max(obs.mm_desired, 1))
    )
    if under:
        shown = ", ".join(under[:5]) + (" …" if len(under) > 5 else "")
        reasons.append(f"{len(under)} under-replicated: {shown}")
    if obs.cm_ready < obs.cm_desired or obs.mm_ready < obs.mm_desired:
        reasons.append(f"brokers ready CM {obs.cm_ready}/{obs.cm_desired} MM {obs.mm_ready}/{obs.mm_desired}")
    if reasons:
        return Condition(TYPE, True, "ReducedRedundancy", "; ".join(reasons))
    return Condition(TYPE, False, "FullRedundancy", "every partition has all its in-sync replicas")
