"""``ScaleDownBlocked``: an MM scale-down the operator refuses (present only while refused)."""

from hybridmq_operator.conditions.model import ClusterObservation, Condition

TYPE = "ScaleDownBlocked"


def evaluate(obs: ClusterObservation) -> Condition | None:
    if obs.scale_down_blocked is None:
        return None
    return Condition(TYPE, True, "BelowMinInSync", obs.scale_down_blocked)
