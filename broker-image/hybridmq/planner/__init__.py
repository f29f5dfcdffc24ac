"""The operator's decisions as pure functions: cluster state in, typed changes out.

Shared by the operator and ``hybridmq local``'s controller, so it lives beside the broker library
(the broker image carries it without carrying the operator); it imports only ``hybridmq.api``.

No Kubernetes or Kopf imports here: the handlers read the state, call ``plan()`` and apply the
changes; ``hybridmq local`` calls ``plan_assignments()``; the tests call both without a cluster.
"""

from hybridmq.planner.changes import (
    Change,
    CreatePartition,
    DeletePartition,
    MessageManagersEvacuated,
    Plan,
    PlanEvent,
    ReleaseFinalizer,
    UpdatePartitionStatus,
)
from hybridmq.planner.domains import DomainSpread, domain_spread
from hybridmq.planner.ondemand import ondemand_name, pick_on_demand_partition, reassign_producers
from hybridmq.planner.plan import LocalPlan, apply_changes, plan, plan_assignments
from hybridmq.planner.scaling import (
    ScaleDownBlock,
    blocked_scale_down,
    fixed_name,
    required_in_sync,
)
from hybridmq.planner.state import (
    ClusterState,
    MessageManager,
    PartitionInfo,
    ReplicaReport,
    decision_shape,
    natural_key,
)

__all__ = [
    "Change",
    "ClusterState",
    "CreatePartition",
    "DeletePartition",
    "DomainSpread",
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
    "decision_shape",
    "domain_spread",
    "fixed_name",
    "natural_key",
    "ondemand_name",
    "pick_on_demand_partition",
    "plan",
    "plan_assignments",
    "reassign_producers",
    "required_in_sync",
]
