"""The composition root of ``hybridmq mm`` and ``hybridmq cm``: the one place that picks where
assignments come from and what the MM's lease is. The servers themselves are the same everywhere:

=====================  ============================  ==========================================
run by                 ``AssignmentSource``           MM ``Liveness``
=====================  ============================  ==========================================
``--controller URL``   ``ControllerSource``          ``Heartbeat`` to the local controller
the operator (a pod)   ``KubeAssignmentSource``      ``KubeLease`` (``Lease/<pod>`` + report)
``--assignments F``    ``FileAssignmentSource``      ``NoLease``
nothing                an empty static source        ``NoLease``
=====================  ============================  ==========================================
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from hybridmq.broker.assignment_source import (
    AssignmentSource,
    FileAssignmentSource,
    StaticAssignmentSource,
)
from hybridmq.broker.auth import AclTable, CredentialStore
from hybridmq.broker.auth import cluster_secret as secret
from hybridmq.broker.cm.server import CMConfig, ConnectionManager
from hybridmq.broker.kube_source import KubeAssignmentSource, source_from_env
from hybridmq.broker.kube_wiring import KubeLease
from hybridmq.broker.mm.liveness import Liveness, NoLease
from hybridmq.broker.mm.server import MessageManager, MMConfig


def assignment_source(
    cluster_secret: str | None,
    *,
    controller: str | None = None,
    assignments: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> AssignmentSource:
    """The local controller's table, a JSON file, the pod's Partitions, or an empty table."""
    if controller:
        from hybridmq.local.source import ControllerSource

        return ControllerSource(controller, secret.require(cluster_secret))
    if assignments:
        return FileAssignmentSource(assignments)
    return source_from_env(os.environ if environ is None else environ) or StaticAssignmentSource()


def lease_for(
    source: AssignmentSource, config: MMConfig, environ: Mapping[str, str] | None = None
) -> Liveness:
    """The lease that whoever fails this MM over (if anyone) watches."""
    if isinstance(source, KubeAssignmentSource):
        return KubeLease.from_env(source, os.environ if environ is None else environ)
    from hybridmq.local.source import ControllerSource

    if isinstance(source, ControllerSource):
        from hybridmq.local.heartbeat import Heartbeat

        return Heartbeat(source.url, secret.require(config.cluster_secret), config.name, source)
    return NoLease()


def message_manager(
    config: MMConfig,
    *,
    controller: str | None = None,
    assignments: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> MessageManager:
    source = assignment_source(
        config.cluster_secret, controller=controller, assignments=assignments, environ=environ
    )
    return MessageManager(config, source, lease_for(source, config, environ))


def connection_manager(
    config: CMConfig,
    credentials: CredentialStore,
    acl: AclTable,
    *,
    controller: str | None = None,
    assignments: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> ConnectionManager:
    source = assignment_source(
        config.cluster_secret, controller=controller, assignments=assignments, environ=environ
    )
    return ConnectionManager(config, source, credentials, acl)
