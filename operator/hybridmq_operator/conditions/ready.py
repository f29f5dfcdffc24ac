"""``Ready``: all broker pods are ready and every partition is available."""

from hybridmq_operator.conditions import all_replicas_ready, partitions_available
from hybridmq_operator.conditions.model import ClusterObservation, Condition

TYPE = "Ready"


def evaluate(obs: ClusterObservation, on_demand_expected: bool = True) -> Condition:
    pods = all_replicas_ready.evaluate(obs)
    if not pods.status:
        return Condition(TYPE, False, pods.reason, pods.message)
    parts = partitions_available.evaluate(obs, on_demand_expected)
    if not parts.status:
        return Condition(TYPE, False, parts.reason, parts.message)
    return Condition(TYPE, True, "ClusterReady", pods.message)
