"""``PartitionsAvailable``: every fixed partition has a live primary and at least one on-demand
partition takes writes (when on-demand partitions are configured)."""

from hybridmq_operator.conditions.model import ClusterObservation, Condition, PartitionObservation

TYPE = "PartitionsAvailable"


def _available(p: PartitionObservation, live: frozenset[str]) -> bool:
    return p.state in ("Active", "Draining") and p.primary is not None and p.primary in live


def evaluate(obs: ClusterObservation, on_demand_expected: bool = True) -> Condition:
    fixed = [p for p in obs.partitions if p.type == "fixed"]
    unavailable = sorted(p.name for p in fixed if not _available(p, obs.live_mms))
    if unavailable:
        shown = ", ".join(unavailable[:5]) + (" …" if len(unavailable) > 5 else "")
        return Condition(
            TYPE, False, "FixedPartitionUnavailable", f"{len(unavailable)} without a live primary: {shown}"
        )
    writable_od = [
        p
        for p in obs.partitions
        if p.type == "on-demand" and p.state == "Active" and p.accept_writes and _available(p, obs.live_mms)
    ]
    if on_demand_expected and obs.mm_desired > 0 and not writable_od:
        return Condition(TYPE, False, "NoWritableOnDemandPartition", "no on-demand partition accepts writes")
    return Condition(
        TYPE, True, "AllAvailable", f"{len(fixed)} fixed and {len(writable_od)} writable on-demand partitions"
    )
