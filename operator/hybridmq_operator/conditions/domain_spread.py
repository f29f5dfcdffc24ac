"""``ReplicasSpreadAcrossDomains``: every fixed partition's replicas are in different failure
domains (the MMs' nodes' values of ``messageManagers.topologyKey``).

False with the planner's reason: ``DomainsUnknown`` (an MM holding replicas has no known domain),
``ReplicasShareDomain`` (enough domains are up; the planner is moving replicas apart) or
``NotEnoughDomains`` (fewer domains than replicas: they share one, still on different MMs). The
message lists the first partitions that are not spread.
"""

from hybridmq_operator.conditions.model import ClusterObservation, Condition

TYPE = "ReplicasSpreadAcrossDomains"


def evaluate(obs: ClusterObservation) -> Condition | None:
    if obs.domain_spread is None:
        return None
    verdict = obs.domain_spread
    return Condition(TYPE, verdict.spread, verdict.reason, verdict.message)
