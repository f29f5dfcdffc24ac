"""Status conditions: one module per condition, each a pure ``evaluate(observation)``."""

from hybridmq_operator.conditions import (
    all_replicas_ready,
    degraded,
    partitions_available,
    ready,
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
    "merge_conditions",
    "partitions_available",
    "ready",
]


def cluster_conditions(obs: ClusterObservation, on_demand_expected: bool = True) -> list[Condition]:
    """The conditions of ``BrokerCluster.status``."""
    return [
        ready.evaluate(obs, on_demand_expected),
        partitions_available.evaluate(obs, on_demand_expected),
        degraded.evaluate(obs),
    ]
