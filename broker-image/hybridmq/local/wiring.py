"""Builds the broker processes of a controller-managed local cluster (``--controller URL``).

The MM is a ``ReplicatedMessageManager`` whose assignments come from the controller
(``ControllerSource``) and whose lease is the controller heartbeat; the CM is a
``FailoverConnectionManager`` on the same source. Both present the cluster secret to the controller.
"""

from __future__ import annotations

from typing import Any

from hybridmq.broker.auth import cluster_secret
from hybridmq.broker.cm.failover import FailoverConnectionManager
from hybridmq.broker.mm.replicated import ReplicatedMessageManager
from hybridmq.broker.mm.server import MMConfig
from hybridmq.local.heartbeat import Heartbeat
from hybridmq.local.source import ControllerSource


def controller_mm(config: MMConfig, url: str, **options: Any) -> ReplicatedMessageManager:
    secret = cluster_secret.require(config.cluster_secret)
    source = ControllerSource(url, secret)
    mm = ReplicatedMessageManager(config, source, **options)
    heartbeat = Heartbeat(url, secret, config.name, mm.replica_manager.report, source)
    mm.liveness = heartbeat
    mm.replica_manager.liveness = heartbeat
    return mm


def controller_cm(config: Any, url: str, *args: Any) -> FailoverConnectionManager:
    source = ControllerSource(url, cluster_secret.require(config.cluster_secret))
    return FailoverConnectionManager(config, source, *args)
