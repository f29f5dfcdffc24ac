"""Status conditions: one module per condition, each a pure ``evaluate(observation)``."""

from hybridmq_operator.conditions import (
    all_replicas_ready,
    degraded,
    domain_spread,
    partitions_available,
    ready,
    rolling,
    scale_down,
)
from hybridmq_operator.conditions.model import (
    ClusterObservation,
    Condition,
    PartitionObservation,
    merge_conditions,
)

__all__ = [
    "ClusterObservation",
    "Condition",
    "PartitionObservation",
    "all_replicas_ready",
    "cluster_conditions",
    "degraded",
    "domain_spread",
    "merge_conditions",
    "partitions_available",
    "ready",
    "rolling",
    "scale_down",
]


def cluster_conditions(obs: ClusterObservation, on_demand_expected: bool = True) -> list[Condition]:
    """The conditions of ``BrokerCluster.status``: Ready, PartitionsAvailable, Degraded,
    ReplicasSpreadAcrossDomains, ScaleDownBlocked while a scale-down is refused, and Rolling."""
    out = [
        ready.evaluate(obs, on_demand_expected),
        partitions_available.evaluate(obs, on_demand_expected),
        degraded.evaluate(obs),
    ]
    spread = domain_spread.evaluate(obs)
    if spread is not None:
        out.append(spread)
    blocked = scale_down.evaluate(obs)
    if blocked is not None:
        out.append(blocked)
    roll = rolling.evaluate(obs)
    if roll is not None:
        out.append(roll)
    return out
