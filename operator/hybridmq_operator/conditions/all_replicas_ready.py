"""``AllReplicasReady``-style check of the broker pods, used by ``Ready``."""

from hybridmq_operator.conditions.model import ClusterObservation, Condition

TYPE = "AllReplicasReady"


def evaluate(obs: ClusterObservation) -> Condition:
    missing = []
    if obs.cm_ready < obs.cm_desired:
        missing.append(f"CMs {obs.cm_ready}/{obs.cm_desired}")
    if obs.mm_ready < obs.mm_desired:
        missing.append(f"MMs {obs.mm_ready}/{obs.mm_desired}")
    if obs.children_error is not None:
        return Condition(TYPE, False, "ChildrenNotApplied", obs.children_error)
    if missing and obs.pod_problems:
        # Say why the pods do not start (e.g. ErrImagePull), not only that they are not ready.
        pod, reason, message = obs.pod_problems[0]
        more = f" (and {len(obs.pod_problems) - 1} more pods)" if len(obs.pod_problems) > 1 else ""
        return Condition(
            TYPE, False, reason, f"ready: {', '.join(missing)}; {pod}: {reason}: {message}{more}"
        )
    if missing:
        return Condition(TYPE, False, "NotAllReplicasReady", "ready: " + ", ".join(missing))
    return Condition(TYPE, True, "AllReplicasReady", f"CMs {obs.cm_ready}, MMs {obs.mm_ready} ready")
