"""A flat, defaulted view of one BrokerCluster: what the builders and handlers read.

The body is parsed with ``hybridmq.api.resources.BrokerCluster`` (the CRD's source), so defaults
and bounds are the same as the API server's. Two knobs are not part of the spec:

* the broker image when ``spec.image`` is unset: ``$HYBRIDMQ_BROKER_IMAGE`` of the operator;
* ``$HYBRIDMQ_BROKER_COMMAND``: the broker command the pods run before their role argument
  (default ``hybridmq``; tests and development point it at a stand-in);
* the annotation ``hybridmq.io/storage: ephemeral`` puts MM data on an emptyDir instead of a
  volumeClaimTemplate (clusters without a storage provisioner, like Strimzi's ephemeral storage);
* the annotation ``hybridmq.io/restartedAt`` (any value, e.g. a timestamp) goes into both pod
  templates: a new value rolls every broker pod (``kubectl rollout restart`` for a BrokerCluster).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hybridmq.api.resources import BrokerCluster, ResourceRequirements
from hybridmq_operator import names

DEFAULT_IMAGE = "ghcr.io/hybridmq/broker:0.1.0"
STORAGE_ANNOTATION = "hybridmq.io/storage"


def _resources(req: ResourceRequirements | None) -> dict[str, Any]:
    return req.model_dump(exclude_none=True) if req is not None else {}


@dataclass(frozen=True)
class ClusterSettings:
    """Everything the operator needs from one BrokerCluster, with defaults applied."""

    name: str
    namespace: str
    uid: str = ""
    generation: int = 0
    image: str = DEFAULT_IMAGE
    image_pull_policy: str = "IfNotPresent"
    broker_command: tuple[str, ...] = ("hybridmq",)
    cm_replicas: int = 2
    mm_replicas: int = 3
    cm_resources: Mapping[str, Any] = field(default_factory=dict)
    mm_resources: Mapping[str, Any] = field(default_factory=dict)
    storage_type: str = "persistent-claim"  # or "ephemeral"
    storage_size: str = "1Gi"
    storage_class: str | None = None
    delete_claim: bool = False
    mm_topology_key: str = "kubernetes.io/hostname"
    fixed_count: int = 3
    fixed_replicas: int = 2
    min_in_sync: int = 2
    on_demand_per_mm: int = 1
    on_demand_replicas: int = 2
    accept_writes_after_failover: bool = False
    lease_duration_seconds: int = 1
    lease_renew_milliseconds: int = 250
    auth: Mapping[str, Any] = field(default_factory=dict)
    tls: Mapping[str, Any] = field(default_factory=dict)
    restarted_at: str | None = None  # the restart request (annotation hybridmq.io/restartedAt)

    @property
    def lease_renew_seconds(self) -> float:
        return self.lease_renew_milliseconds / 1000

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> ClusterSettings:
        model = BrokerCluster.model_validate(dict(body))
        meta, spec = model.metadata, model.spec
        annotations = dict((body.get("metadata") or {}).get("annotations") or {})
        return cls(
            name=meta.name or "",
            namespace=meta.namespace or "default",
            uid=meta.uid or "",
            generation=meta.generation or 0,
            image=spec.image or os.environ.get("HYBRIDMQ_BROKER_IMAGE") or DEFAULT_IMAGE,
            image_pull_policy=str(spec.image_pull_policy.value),
            broker_command=tuple(shlex.split(os.environ.get("HYBRIDMQ_BROKER_COMMAND", "hybridmq"))),
            cm_replicas=spec.connection_managers.replicas,
            mm_replicas=spec.message_managers.replicas,
            cm_resources=_resources(spec.connection_managers.resources),
            mm_resources=_resources(spec.message_managers.resources),
            storage_type=str(annotations.get(STORAGE_ANNOTATION, "persistent-claim")),
            storage_size=str(spec.message_managers.storage.size),
            storage_class=spec.message_managers.storage.storage_class_name,
            delete_claim=spec.message_managers.storage.delete_claim,
            mm_topology_key=spec.message_managers.topology_key,
            fixed_count=spec.partitions.fixed.count,
            fixed_replicas=spec.partitions.fixed.replicas,
            min_in_sync=spec.partitions.fixed.min_in_sync,
            on_demand_per_mm=spec.partitions.on_demand.per_message_manager,
            on_demand_replicas=spec.partitions.on_demand.replicas,
            accept_writes_after_failover=spec.partitions.on_demand.accept_writes_after_failover,
            lease_duration_seconds=spec.failure_detection.lease_duration_seconds,
            lease_renew_milliseconds=spec.failure_detection.renew_interval_milliseconds,
            auth=spec.auth.model_dump(exclude_none=True),
            tls=spec.tls.model_dump(exclude_none=True),
            restarted_at=annotations.get(names.ANNOTATION_RESTARTED_AT),
        )
