"""``AllReplicasReady``-style check of the broker pods, used by ``Ready``."""

from hybridmq_operator.conditions.model import ClusterObservation, Condition

TYPE = "AllReplicasReady"


def evaluate(obs: ClusterObservation) -> Condition:
    missing = []
    if obs.cm_ready < obs.cm_desired:
        missing.append(f"CMs {obs.cm_ready}/{obs.cm_desired}")
    if obs.mm_ready < obs.mm_desired:
        missing.append(f"MMs {obs.mm_ready}/{obs.mm_desired}")
    if missing:
        return Condition(TYPE, False, "NotAllReplicasReady", "ready: " + ", ".join(missing))
    return Condition(TYPE, True, "AllReplicasReady", f"CMs {obs.cm_ready}, MMs {obs.mm_ready} ready")
