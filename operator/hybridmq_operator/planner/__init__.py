"""The operator's decisions as pure functions: cluster state in, typed changes out.

No Kubernetes or Kopf imports here: the handlers read the state, call ``plan()`` and apply the
changes; ``hybridmq local`` calls ``plan_assignments()``; the tests call both without a cluster.
"""

from hybridmq_operator.planner.changes import (
    Change,
    CreatePartition,
    DeletePartition,
    MessageManagersEvacuated,
    Plan,
    PlanEvent,
    ReleaseFinalizer,
    UpdatePartitionStatus,
)
from hybridmq_operator.planner.ondemand import ondemand_name, pick_on_demand_partition, reassign_producers
from hybridmq_operator.planner.plan import LocalPlan, apply_changes, plan, plan_assignments
from hybridmq_operator.planner.scaling import (
    ScaleDownBlock,
    blocked_scale_down,
    fixed_name,
    required_in_sync,
)
from hybridmq_operator.planner.state import (
    ClusterState,
    MessageManager,
    PartitionInfo,
    ReplicaReport,
    natural_key,
)

__all__ = [
    "Change",
    "ClusterState",
    "CreatePartition",
    "DeletePartition",
    "LocalPlan",
    "MessageManager",
    "MessageManagersEvacuated",
    "PartitionInfo",
    "Plan",
    "PlanEvent",
    "ReleaseFinalizer",
    "ReplicaReport",
    "ScaleDownBlock",
    "UpdatePartitionStatus",
    "apply_changes",
    "blocked_scale_down",
    "fixed_name",
    "natural_key",
    "ondemand_name",
    "pick_on_demand_partition",
    "plan",
    "plan_assignments",
    "reassign_producers",
    "required_in_sync",
]
