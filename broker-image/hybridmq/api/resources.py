"""Pydantic models of HybridMQ's custom resources: ``BrokerCluster`` and ``Partition``.

Group ``hybridmq.io``, version ``v1alpha1``. These models are the source of the CRD YAML in ``crds/``
(``python -m hybridmq.api.crdgen crds/``): field descriptions, defaults, bounds and the CEL rules
declared here end up in the OpenAPI schema the API server enforces.

Python attributes are snake_case; the JSON (what Kubernetes stores) is camelCase. Both spellings are
accepted on input and ``model_dump()`` writes camelCase.

The shapes follow Strimzi: ``spec`` is what the user asks for, ``status`` is written only by the
operator and carries ``observedGeneration`` and Kubernetes-style ``conditions``.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, ClassVar, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from hybridmq.api.assignment import (
    BrokerEntry,
    BrokerRole,
    PartitionAssignment,
    PartitionState,
    PartitionType,
)

__all__ = [
    "API_VERSION",
    "GROUP",
    "LABEL_CLUSTER",
    "LABEL_PARTITION_TYPE",
    "PARTITION_FINALIZER",
    "VERSION",
    "AclOperation",
    "AclRule",
    "AuthSpec",
    "BrokerCluster",
    "BrokerClusterSpec",
    "BrokerClusterStatus",
    "BrokerRole",
    "BrokerStatusEntry",
    "BrokerUser",
    "BrokerUserSpec",
    "BrokerUserStatus",
    "Condition",
    "ConditionStatus",
    "ConnectionManagersSpec",
    "FailoverRecord",
    "FailureDetectionSpec",
    "FixedPartitionsSpec",
    "ImagePullPolicy",
    "MessageManagersSpec",
    "ObjectMeta",
    "OnDemandPartitionsSpec",
    "Partition",
    "PartitionCounts",
    "PartitionSpec",
    "PartitionState",
    "PartitionStatus",
    "PartitionType",
    "PartitionsSpec",
    "PasswordSecretRef",
    "ResourceRequirements",
    "StorageSpec",
    "TlsSpec",
    "partition_to_assignment",
    "set_condition",
]

GROUP = "hybridmq.io"
VERSION = "v1alpha1"
API_VERSION: Final = "hybridmq.io/v1alpha1"
# Kept on every Partition until the MMs have deleted its data.
PARTITION_FINALIZER = "hybridmq.io/partition-data"
# Labels the operator puts on every Partition (the brokers' watch selects on the cluster label).
LABEL_CLUSTER = "hybridmq.io/cluster"
LABEL_PARTITION_TYPE = "hybridmq.io/partition-type"

# Kubernetes object names (DNS subdomain) and label-ish names.
_NAME_MAX = 253
_CLUSTER_NAME_MAX = 63
# A BrokerCluster's own name: its StatefulSet pods carry the label
# ``controller-revision-hash=<cluster>-mm-<hash of up to 10 characters>``, a label value of at most
# 63 characters, so longer names would give children the API server refuses.
CLUSTER_NAME_LIMIT = 49

# Limits (see the README's operator section): each MM reports every partition it holds in one Lease
# annotation (at most 256 KiB for all annotations of an object), and the operator plans and writes
# every partition of a cluster.
MAX_MESSAGE_MANAGERS = 100
MAX_CONNECTION_MANAGERS = 100
MAX_FIXED_PARTITIONS = 1000
MAX_ON_DEMAND_PER_MM = 16
MAX_REPLICAS = 5
# Partitions per cluster (fixed + on-demand). An MM holds at most one copy of each, so this also
# bounds what one MM reports.
MAX_PARTITIONS_PER_CLUSTER = 2000


def _default_of(model: type[BaseModel]) -> dict[str, Any]:
    """JSON-schema extra giving an optional nested object its complete default value, so that the
    API server fills it in (and its CEL rules, which it checks against the default, hold)."""
    return {"default": model().model_dump(mode="json", by_alias=True, exclude_none=True)}


def _rules(*rules: tuple[str, str]) -> dict[str, Any]:
    """``x-kubernetes-validations`` (CEL) for a field or a model: (rule, message) pairs."""
    return {"x-kubernetes-validations": [{"rule": rule, "message": message} for rule, message in rules]}


def _checked(*rules: tuple[str, str]) -> ConfigDict:
    """The config of a model the API server checks with CEL ``rules`` (camelCase field names)."""
    return ConfigDict(json_schema_extra=_rules(*rules))


def _section(model: type[BaseModel]) -> Any:
    """A nested section of a spec that may be left out: its model's defaults, complete in the CRD."""
    return Field(default_factory=model, json_schema_extra=_default_of(model))


class _Model(BaseModel):
    """Base of every resource model: camelCase JSON, snake_case Python, unknown fields ignored."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        serialize_by_alias=True,
        extra="ignore",
        use_enum_values=False,
    )


# --------------------------------------------------------------------------------------------------
# Shared pieces
# --------------------------------------------------------------------------------------------------


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(_Model):
    """A Kubernetes-style status condition (as in Strimzi and metav1.Condition)."""

    type: str = Field(max_length=316, description="Condition type, e.g. Ready.")
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: str | None = Field(default=None, description="One CamelCase word for the last transition.")
    message: str | None = Field(default=None, description="A human-readable explanation.")
    last_transition_time: datetime | None = Field(
        default=None, description="When the condition last changed status."
    )
    observed_generation: int | None = Field(
        default=None, ge=0, description="The metadata.generation the condition was computed from."
    )


def set_condition(
    conditions: list[Condition],
    type_: str,
    status: ConditionStatus | bool,
    reason: str,
    message: str,
    now: datetime,
    observed_generation: int | None = None,
) -> list[Condition]:
    """Return ``conditions`` with the condition ``type_`` set; lastTransitionTime moves only when
    the status changes. The input list is not modified."""
    if isinstance(status, bool):
        status = ConditionStatus.TRUE if status else ConditionStatus.FALSE
    out: list[Condition] = []
    found = False
    for cond in conditions:
        if cond.type != type_:
            out.append(cond)
            continue
        found = True
        ltt = cond.last_transition_time if cond.status == status else now
        out.append(
            Condition(
                type=type_,
                status=status,
                reason=reason,
                message=message,
                last_transition_time=ltt,
                observed_generation=observed_generation,
            )
        )
    if not found:
        out.append(
            Condition(
                type=type_,
                status=status,
                reason=reason,
                message=message,
                last_transition_time=now,
                observed_generation=observed_generation,
            )
        )
    return out


class ObjectMeta(_Model):
    """The subset of metav1.ObjectMeta the project reads. Not part of the CRD schema."""

    name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    generation: int | None = None
    resource_version: str | None = None
    creation_timestamp: datetime | None = None
    deletion_timestamp: datetime | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    finalizers: list[str] = Field(default_factory=list)
    owner_references: list[dict[str, Any]] = Field(default_factory=list)


# Kubernetes quantities ("500m", "1Gi", 2) are strings or integers.
Quantity = str | int


class ResourceRequirements(_Model):
    """CPU and memory requests and limits of a container (as in a Pod spec)."""

    requests: dict[str, Quantity] | None = Field(default=None, description="e.g. {cpu: 250m, memory: 256Mi}")
    limits: dict[str, Quantity] | None = Field(default=None, description="e.g. {memory: 512Mi}")


# --------------------------------------------------------------------------------------------------
# BrokerCluster
# --------------------------------------------------------------------------------------------------


class ImagePullPolicy(StrEnum):
    ALWAYS = "Always"
    IF_NOT_PRESENT = "IfNotPresent"
    NEVER = "Never"


class ConnectionManagersSpec(_Model):
    """Connection Managers: stateless front ends that clients connect to."""

    replicas: int = Field(default=2, ge=0, le=MAX_CONNECTION_MANAGERS, description="Number of CM pods.")
    resources: ResourceRequirements | None = Field(default=None, description="CM container resources.")


class StorageSpec(_Model):
    """The persistent volume each Message Manager keeps its partition logs on."""

    size: Quantity = Field(
        default="1Gi",
        description="Requested size of each MM volume, e.g. 10Gi.",
        json_schema_extra=_rules(
            (
                "type(self) == int ? self > 0"
                " : (isQuantity(self) && quantity(self).isGreaterThan(quantity('0')))",
                "messageManagers.storage.size must be a positive quantity, e.g. 10Gi",
            )
        ),
    )
    storage_class_name: str | None = Field(
        default=None, description="StorageClass of the volume claims; the cluster default when unset."
    )
    delete_claim: bool = Field(
        default=False,
        description="Delete the MMs' volume claims (and so their data) when the BrokerCluster is "
        "deleted. By default they are kept, as Strimzi's deleteClaim: false does.",
    )


class MessageManagersSpec(_Model):
    """Message Managers: the pods that store partitions."""

    replicas: int = Field(default=3, ge=0, le=MAX_MESSAGE_MANAGERS, description="Number of MM pods.")
    storage: StorageSpec = _section(StorageSpec)
    resources: ResourceRequirements | None = Field(default=None, description="MM container resources.")
    topology_key: str = Field(
        default="kubernetes.io/hostname",
        min_length=1,
        description="Node label whose values are failure domains (node, zone, rack). MM pods are "
        "spread over its values (preferred pod anti-affinity, as Strimzi's rack awareness does), and "
        "the replicas of each fixed partition are placed on MMs of different domains whenever there "
        "are enough (else on different MMs); the condition ReplicasSpreadAcrossDomains says whether "
        "they are.",
    )


class FixedPartitionsSpec(_Model):
    """Fixed partitions keep their identity and their order for ever; they move with their data."""

    model_config = _checked(
        ("self.minInSync <= self.replicas", "partitions.fixed.minInSync must be <= replicas"),
    )

    count: int = Field(
        default=3,
        ge=0,
        le=MAX_FIXED_PARTITIONS,
        description="Number of fixed partitions. It can grow but never shrink.",
        json_schema_extra=_rules(
            (
                "self >= oldSelf",
                "partitions.fixed.count cannot be decreased: fixed partitions keep their identity",
            )
        ),
    )
    replicas: int = Field(
        default=2, ge=1, le=MAX_REPLICAS, description="Copies of each partition, the primary included."
    )
    min_in_sync: int = Field(
        default=2,
        ge=1,
        le=MAX_REPLICAS,
        description="Copies that must hold a message before it is acknowledged (never fewer: writes "
        "are refused with NOT_ENOUGH_REPLICAS while fewer copies are in sync).",
    )

    @model_validator(mode="after")
    def _min_in_sync_le_replicas(self) -> FixedPartitionsSpec:
        if self.min_in_sync > self.replicas:
            raise ValueError("partitions.fixed.minInSync must be <= replicas")
        return self


class OnDemandPartitionsSpec(_Model):
    """On-demand partitions are cheap and disposable."""

    per_message_manager: int = Field(
        default=1,
        ge=0,
        le=MAX_ON_DEMAND_PER_MM,
        description="Writable on-demand partitions kept with their primary on each MM.",
    )
    replicas: int = Field(default=2, ge=1, le=MAX_REPLICAS, description="Copies of each on-demand partition.")
    accept_writes_after_failover: bool = Field(
        default=False,
        description="Whether an on-demand partition taken over after a failover keeps accepting writes "
        "while it drains (by default it only serves consumers until empty, then is deleted).",
    )
    retention_after_drain_seconds: int = Field(
        default=300,
        ge=0,
        description="How long a draining on-demand partition is kept once it is empty (no producer "
        "attached, backlog zero, every named reader cursor at the end) before it is deleted.",
    )


class PartitionsSpec(_Model):
    fixed: FixedPartitionsSpec = _section(FixedPartitionsSpec)
    on_demand: OnDemandPartitionsSpec = _section(OnDemandPartitionsSpec)


class FailureDetectionSpec(_Model):
    """How quickly a lost MM is noticed: each MM renews a coordination.k8s.io Lease."""

    model_config = _checked(
        (
            "self.renewIntervalMilliseconds < self.leaseDurationSeconds * 1000",
            "failureDetection.renewIntervalMilliseconds must be shorter than the lease duration",
        ),
    )

    lease_duration_seconds: int = Field(
        default=1, ge=1, le=300, description="An MM whose Lease is older than this is lost."
    )
    renew_interval_milliseconds: int = Field(
        default=250, ge=50, le=300_000, description="How often each MM renews its Lease."
    )

    @model_validator(mode="after")
    def _renew_shorter_than_lease(self) -> FailureDetectionSpec:
        if self.renew_interval_milliseconds >= self.lease_duration_seconds * 1000:
            raise ValueError("failureDetection.renewIntervalMilliseconds must be shorter than the lease")
        return self


class AuthSpec(_Model):
    """Client authentication at the CMs."""

    enabled: bool = Field(default=False, description="Require clients to authenticate.")
    secret_name: str | None = Field(
        default=None,
        max_length=_NAME_MAX,
        description="Secret holding the users and their ACLs; generated by the operator when unset.",
    )


class TlsSpec(_Model):
    """TLS on every listener: clients -> CMs, CMs -> MMs, MM replication, the HTTP endpoints."""

    model_config = _checked(
        (
            "!has(self.secretName) || self.enabled",
            "tls.secretName names the certificates of a TLS listener: it needs tls.enabled true",
        ),
    )

    enabled: bool = Field(
        default=True,
        description="TLS on every listener, mutual TLS between brokers; plain TCP only when false.",
    )
    secret_name: str | None = Field(
        default=None,
        max_length=_NAME_MAX,
        description="Secret with tls.crt, tls.key and ca.crt (e.g. written by a cert-manager Certificate) "
        "used by every broker instead of a certificate of the operator's cluster CA.",
    )


class BrokerClusterSpec(_Model):
    model_config = _checked(
        (
            "self.messageManagers.replicas == 0"
            " || self.partitions.fixed.minInSync <= self.messageManagers.replicas",
            "partitions.fixed.minInSync must be <= messageManagers.replicas: with fewer MMs no "
            "write could ever be acknowledged",
        ),
        (
            "self.partitions.fixed.count + self.partitions.onDemand.perMessageManager"
            f" * self.messageManagers.replicas <= {MAX_PARTITIONS_PER_CLUSTER}",
            f"at most {MAX_PARTITIONS_PER_CLUSTER} partitions per cluster "
            "(partitions.fixed.count + onDemand.perMessageManager * messageManagers.replicas)",
        ),
    )

    image: str | None = Field(
        default=None, description="Broker image (CM and MM); the operator's default when unset."
    )
    image_pull_policy: ImagePullPolicy = Field(default=ImagePullPolicy.IF_NOT_PRESENT)
    connection_managers: ConnectionManagersSpec = _section(ConnectionManagersSpec)
    message_managers: MessageManagersSpec = _section(MessageManagersSpec)
    partitions: PartitionsSpec = _section(PartitionsSpec)
    failure_detection: FailureDetectionSpec = _section(FailureDetectionSpec)
    auth: AuthSpec = _section(AuthSpec)
    tls: TlsSpec = _section(TlsSpec)


class BrokerStatusEntry(_Model):
    """One row of the broker table: the directory clients use to find CMs (and brokers each other)."""

    name: str = Field(max_length=_NAME_MAX, description="Pod name.")
    role: BrokerRole = Field(description="cm or mm.")
    address: str = Field(description="host:port of the binary protocol.")
    http_address: str | None = Field(default=None, description="host:port of /healthz, /metrics, /admin.")
    ready: bool = Field(default=False)

    def to_entry(self) -> BrokerEntry:
        return BrokerEntry(
            name=self.name,
            role=self.role,
            address=self.address,
            http_address=self.http_address,
            ready=self.ready,
        )


class PartitionCounts(_Model):
    total: int = Field(default=0, ge=0)
    fixed: int = Field(default=0, ge=0)
    on_demand: int = Field(default=0, ge=0)
    active: int = Field(default=0, ge=0)
    pending: int = Field(default=0, ge=0)
    migrating: int = Field(default=0, ge=0)
    draining: int = Field(default=0, ge=0)


MAX_FAILOVER_HISTORY = 10


class ClusterFailover(_Model):
    """One MM's primaries moving away: lost (a failover) or stopping (a graceful handoff)."""

    kind: Literal["failover", "handoff"] = Field(default="failover")
    lost: str = Field(default="", description="The MM whose primaries moved.")
    reason: str = Field(default="", description="Why, e.g. 'pod deleted', 'graceful handoff: ...'.")
    detected_at: datetime | None = Field(
        default=None, description="When the loss (or the stop request) was first seen."
    )
    completed_at: datetime | None = Field(
        default=None, description="When every partition it led had a new primary (unset: not yet)."
    )
    duration_seconds: float | None = Field(
        default=None, ge=0, description="From detection to completion (unset: not complete)."
    )
    partitions: int = Field(default=0, ge=0, description="Partitions that got a new primary.")
    offline: int = Field(default=0, ge=0, description="Partitions left without an in-sync replica.")


class RollProgress(_Model):
    """Where a roll of the broker pods (a new pod template) stands."""

    pod: str | None = Field(default=None, description="The pod the roll is at (unset: none).")
    message_managers_updated: int = Field(default=0, ge=0, description="MM pods at the current revision.")
    message_managers: int = Field(default=0, ge=0)
    connection_managers_updated: int = Field(default=0, ge=0, description="CM pods at the current revision.")
    connection_managers: int = Field(default=0, ge=0)


class BrokerClusterStatus(_Model):
    observed_generation: int | None = Field(default=None, ge=0)
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Ready, PartitionsAvailable, Degraded.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    ready_connection_managers: int = Field(default=0, ge=0)
    ready_message_managers: int = Field(default=0, ge=0)
    brokers: list[BrokerStatusEntry] = Field(
        default_factory=list,
        description="The broker table clients use as their directory.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    partitions: PartitionCounts = Field(default_factory=PartitionCounts)
    failovers: list[ClusterFailover] = Field(
        default_factory=list,
        max_length=MAX_FAILOVER_HISTORY,
        description="The last failovers and graceful handoffs, newest first.",
    )
    last_failover_seconds: float | None = Field(
        default=None, ge=0, description="Duration of the last completed failover or handoff."
    )
    roll: RollProgress | None = Field(default=None, description="Progress of the broker pods' roll.")

    def broker_entries(self) -> list[BrokerEntry]:
        return [b.to_entry() for b in self.brokers]


class _Object(_Model):
    """A namespaced object of the hybridmq.io group: its names in the API (class constants, the
    CRD's) and the fields every such object has. ``kind``, ``spec`` and ``status`` are its own."""

    KIND: ClassVar[str]
    PLURAL: ClassVar[str]
    SINGULAR: ClassVar[str]
    SHORT_NAMES: ClassVar[tuple[str, ...]]

    api_version: Literal["hybridmq.io/v1alpha1"] = API_VERSION
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)


class BrokerCluster(_Object):
    """A HybridMQ cluster: CMs, MMs and the partitions they serve."""

    KIND: ClassVar[str] = "BrokerCluster"
    PLURAL: ClassVar[str] = "brokerclusters"
    SINGULAR: ClassVar[str] = "brokercluster"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("hbc",)

    kind: Literal["BrokerCluster"] = "BrokerCluster"
    spec: BrokerClusterSpec = Field(default_factory=BrokerClusterSpec)
    status: BrokerClusterStatus | None = None


# --------------------------------------------------------------------------------------------------
# Partition
# --------------------------------------------------------------------------------------------------


class PartitionSpec(_Model):
    """What the partition is. Written by the operator when it creates the partition."""

    model_config = _checked(
        ("self.type == 'fixed' || !has(self.key)", "spec.key is only allowed when spec.type is fixed"),
        (
            "!has(self.minInSync) || self.minInSync <= self.replicas",
            "spec.minInSync must be <= spec.replicas",
        ),
    )

    cluster: str = Field(
        min_length=1,
        max_length=_CLUSTER_NAME_MAX,
        description="Name of the BrokerCluster (same namespace) this partition belongs to.",
        json_schema_extra=_rules(("self == oldSelf", "spec.cluster is immutable")),
    )
    type: PartitionType = Field(
        description="fixed: keeps identity and order through failover; on-demand: disposable.",
        json_schema_extra=_rules(("self == oldSelf", "spec.type is immutable")),
    )
    replicas: int = Field(default=2, ge=1, description="Copies, the primary included.")
    min_in_sync: int | None = Field(
        default=None, ge=1, description="Copies that must hold a message before it is acknowledged."
    )
    key: str | None = Field(
        default=None, max_length=_NAME_MAX, description="Routing key of a fixed partition (optional)."
    )

    @model_validator(mode="after")
    def _check(self) -> PartitionSpec:
        if self.key is not None and self.type != PartitionType.FIXED:
            raise ValueError("spec.key is only allowed when spec.type is fixed")
        if self.min_in_sync is not None and self.min_in_sync > self.replicas:
            raise ValueError("spec.minInSync must be <= spec.replicas")
        return self


class FailoverRecord(_Model):
    """The last time the partition's primary changed because of a failure or an evacuation."""

    from_: str | None = Field(default=None, alias="from", description="The previous primary.")
    to: str | None = Field(default=None, description="The new primary (unset: no in-sync replica left).")
    reason: str = Field(default="", description="Why, e.g. 'lease expired', 'pod deleted'.")
    duration_seconds: float = Field(default=0.0, ge=0, description="From MM loss to the new status.")
    time: datetime | None = Field(default=None)

    @property
    def left_offline(self) -> bool:
        """The loss of ``from_`` left the partition without a primary (no in-sync copy alive)."""
        return self.to is None and bool(self.from_)


class PartitionStatus(_Model):
    """Placement and health of one partition. Written only by the operator."""

    state: PartitionState = Field(default=PartitionState.PENDING)
    epoch: int = Field(default=0, ge=0, description="Grows on each primary change; fences old primaries.")
    primary: str | None = Field(default=None, description="MM pod holding the primary copy.")
    replicas: list[str] = Field(default_factory=list, description="MMs holding a copy, in rank order.")
    in_sync: list[str] = Field(default_factory=list, description="Replicas caught up with the primary.")
    accept_writes: bool = Field(default=True, description="False while an on-demand partition drains.")
    replica_offsets: dict[str, int] = Field(
        default_factory=dict, description="Last reported log end offset of each replica."
    )
    log_end_offset: int = Field(default=0, ge=0, description="Next offset the primary will assign.")
    committed_offset: int = Field(default=0, ge=0, description="High watermark: replicated to minInSync.")
    backlog: int = Field(default=0, ge=0, description="Messages not yet consumed by every subscription.")
    producers: int = Field(
        default=0, ge=0, description="Producers attached (recently writing or not yet moved away)."
    )
    reader_lag: int = Field(
        default=0, ge=0, description="Records the furthest-behind named reader cursor has not committed."
    )
    drained_since: datetime | None = Field(
        default=None,
        description="When the draining partition was first seen empty; deleted after the retention.",
    )
    reported_epoch: int | None = Field(
        default=None, ge=0, description="Epoch of the primary's report the offsets and backlog come from."
    )
    last_failover: FailoverRecord | None = None
    observed_generation: int | None = Field(default=None, ge=0)
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Ready, UnderReplicated.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )

    @property
    def backups(self) -> list[str]:
        return [r for r in self.replicas if r != self.primary]


class Partition(_Object):
    """One partition of a BrokerCluster, fixed or on-demand."""

    KIND: ClassVar[str] = "Partition"
    PLURAL: ClassVar[str] = "partitions"
    SINGULAR: ClassVar[str] = "partition"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("hpart",)

    kind: Literal["Partition"] = "Partition"
    spec: PartitionSpec
    status: PartitionStatus | None = None

    def to_assignment(self, min_in_sync: int | None = None) -> PartitionAssignment:
        return partition_to_assignment(self, min_in_sync=min_in_sync)


def partition_to_assignment(partition: Partition, min_in_sync: int | None = None) -> PartitionAssignment:
    """The broker's flattened view of a Partition resource.

    ``min_in_sync`` overrides ``spec.minInSync``; without either it is ``min(2, spec.replicas)``.
    A Partition without a status yet is Pending with no primary.
    """
    name = partition.metadata.name
    if not name:
        raise ValueError("a Partition without metadata.name has no assignment")
    spec = partition.spec
    mis = min_in_sync if min_in_sync is not None else spec.min_in_sync
    if mis is None:
        mis = min(2, spec.replicas)
    status = partition.status or PartitionStatus()
    return PartitionAssignment(
        name=name,
        type=spec.type,
        state=status.state,
        epoch=status.epoch,
        primary=status.primary,
        replicas=tuple(status.replicas),
        in_sync=tuple(status.in_sync),
        accept_writes=status.accept_writes,
        min_in_sync=max(1, mis),
        drained_since=status.drained_since,
    )


# --------------------------------------------------------------------------------------------------
# BrokerUser
# --------------------------------------------------------------------------------------------------

USERNAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$"


class AclOperation(StrEnum):
    PRODUCE = "produce"
    CONSUME = "consume"
    ADMIN = "admin"


class AclRule(_Model):
    """What the user may do on the destinations a pattern matches."""

    destination: str = Field(
        min_length=1,
        max_length=256,
        description="Glob over canonical destination names: queue:orders.*, topic:*, queue:bob.",
    )
    operations: list[AclOperation] = Field(
        min_length=1,
        max_length=3,
        description="produce, consume, admin.",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )


class PasswordSecretRef(_Model):
    name: str = Field(min_length=1, max_length=_NAME_MAX, description="Secret in the user's namespace.")
    key: str = Field(default="password", min_length=1, max_length=_NAME_MAX, description="Key holding it.")


class BrokerUserSpec(_Model):
    """A client identity of one BrokerCluster: its password and what it may do."""

    cluster: str = Field(
        min_length=1,
        max_length=_CLUSTER_NAME_MAX,
        description="The BrokerCluster (same namespace) whose CMs admit this user.",
        json_schema_extra=_rules(("self == oldSelf", "spec.cluster is immutable")),
    )
    username: str | None = Field(
        default=None,
        pattern=USERNAME_PATTERN,
        description="The name clients log in with; metadata.name when unset.",
        json_schema_extra=_rules(("self == oldSelf", "spec.username is immutable")),
    )
    password_secret: PasswordSecretRef | None = Field(
        default=None,
        description="Where the password is; unset: the operator generates one into Secret "
        "<metadata.name>-credentials (keys username, password).",
    )
    acls: list[AclRule] = Field(
        default_factory=list,
        max_length=64,
        description="Grants; none: the user may connect but neither produce nor consume.",
    )


class BrokerUserStatus(_Model):
    observed_generation: int | None = Field(default=None, ge=0)
    username: str | None = None
    password_secret: str | None = Field(default=None, description="The Secret holding the password.")
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Ready: the CMs admit the user with these grants (False: the reason says why not).",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )


class BrokerUser(_Object):
    """A user of a BrokerCluster and its ACLs, kept in sync on the CMs by the operator."""

    KIND: ClassVar[str] = "BrokerUser"
    PLURAL: ClassVar[str] = "brokerusers"
    SINGULAR: ClassVar[str] = "brokeruser"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("hbu",)

    kind: Literal["BrokerUser"] = "BrokerUser"
    spec: BrokerUserSpec
    status: BrokerUserStatus | None = None

    @property
    def username(self) -> str:
        return self.spec.username or self.metadata.name or ""
