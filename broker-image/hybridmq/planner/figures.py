"""How often reported figures reach the Partition statuses (pure).

The MMs report offsets, backlog and producers several times a second; with a thousand partitions
taking traffic, writing every change into every status is a thousand writes per report, more than
the API server takes (about 140 status writes a second on two shared cores), and a failover's
writes queue behind them. The figures are for people and tools (``kubectl get hpart``): every
decision is made from the MMs' reports themselves. So a status change that is only figures is
written at most every ``min_interval_s`` per partition and ``max_per_round`` per round (the
stalest first); any other change (placement, epoch, in-sync set, state, conditions, drain) is
written at once, figures included.
"""

from __future__ import annotations

from collections.abc import Mapping

from hybridmq.api.resources import PartitionStatus
from hybridmq.planner.changes import Plan, UpdatePartitionStatus

__all__ = ["FIGURE_FIELDS", "figures_only", "throttle_figures"]

FIGURE_FIELDS = frozenset(
    {
        "replica_offsets",
        "log_end_offset",
        "committed_offset",
        "backlog",
        "producers",
        "reader_lag",
        "reported_epoch",
    }
)
MIN_INTERVAL_S = 5.0
MAX_PER_ROUND = 10


def figures_only(before: PartitionStatus | None, after: PartitionStatus) -> bool:
    """Whether ``after`` differs from ``before`` in reported figures alone."""
    if before is None:
        return False
    return before.model_copy(update={f: getattr(after, f) for f in FIGURE_FIELDS}) == after


def throttle_figures(
    plan: Plan,
    before: Mapping[str, PartitionStatus | None],
    last_written: Mapping[str, float],
    now: float,
    min_interval_s: float = MIN_INTERVAL_S,
    max_per_round: int = MAX_PER_ROUND,
) -> Plan:
    """``plan`` without the figure-only status updates that are not due yet (``last_written``:
    when each partition's status was last written, on the same clock as ``now``)."""
    due: list[UpdatePartitionStatus] = []
    held: set[str] = set()
    for change in plan.updates():
        if figures_only(before.get(change.name), change.status):
            if now - last_written.get(change.name, float("-inf")) >= min_interval_s:
                due.append(change)
            else:
                held.add(change.name)
    due.sort(key=lambda c: last_written.get(c.name, float("-inf")))
    held.update(c.name for c in due[max_per_round:])
    if not held:
        return plan
    return Plan(
        changes=tuple(
            c for c in plan.changes if not (isinstance(c, UpdatePartitionStatus) and c.name in held)
        ),
        safe_to_remove=plan.safe_to_remove,
        evacuating=plan.evacuating,
        offline=plan.offline,
    )
