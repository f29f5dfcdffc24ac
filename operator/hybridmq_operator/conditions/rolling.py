"""``Rolling``: a roll of the broker pods (a new pod template) in progress, and what it waits for.

True while a pod runs an older revision, with the reason of the step (``MovingReplicas``,
``Restarting``, ``WaitingForReady``, ``WaitingForInSync``, ``Unmarking``); False with ``Done`` once
every pod runs the current one (or ``Unmarking`` for the round that unmarks an MM a reverted spec no
longer restarts). Absent until the operator has seen both StatefulSets' revisions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from hybridmq.planner.roll import RollDecision
from hybridmq_operator.conditions.model import ClusterObservation, Condition

TYPE = "Rolling"


def from_decision(
    decision: RollDecision | None, previous: Iterable[Mapping[str, Any]] | None
) -> Condition | None:
    """The condition for this round's roll decision; None (not known this round): the last one."""
    if decision is not None:
        return Condition(TYPE, decision.rolling, decision.reason, decision.message)
    for c in previous or ():
        if c.get("type") == TYPE:
            return Condition(
                TYPE, c.get("status") == "True", str(c.get("reason")), str(c.get("message") or "")
            )
    return None


def evaluate(obs: ClusterObservation) -> Condition | None:
    return obs.rolling
