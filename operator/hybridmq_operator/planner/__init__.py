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
from hybridmq_operator.planner.scaling import fixed_name
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
    "UpdatePartitionStatus",
    "apply_changes",
    "fixed_name",
    "natural_key",
    "ondemand_name",
    "pick_on_demand_partition",
    "plan",
    "plan_assignments",
    "reassign_producers",
]
