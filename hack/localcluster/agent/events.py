"""Kubernetes Events about pods, as the kubelet posts them (shown by `kubectl describe pod`)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from localcluster.agent.kube import JSON, Kube

log = logging.getLogger("localcluster.agent.events")


class EventRecorder:
    """Posts core/v1 Events for one pod; repeated identical events are sent only once."""

    def __init__(self, kube: Kube, node_name: str, pod: JSON) -> None:
        self.kube = kube
        self.node_name = node_name
        meta = pod["metadata"]
        self.namespace: str = meta["namespace"]
        self.involved: JSON = {
            "apiVersion": "v1",
            "kind": "Pod",
            "namespace": meta["namespace"],
            "name": meta["name"],
            "uid": meta["uid"],
        }
        self._sent: set[tuple[str, str, str]] = set()

    def record(
        self, reason: str, message: str, warning: bool = False, container: str = "", once: bool = True
    ) -> None:
        key = (reason, message, container)
        if once and key in self._sent:
            return
        self._sent.add(key)
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        involved = dict(self.involved)
        if container:
            involved["fieldPath"] = f"spec.containers{{{container}}}"
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{self.involved['name']}.", "namespace": self.namespace},
            "involvedObject": involved,
            "reason": reason,
            "message": message,
            "type": "Warning" if warning else "Normal",
            "source": {"component": "kubelet", "host": self.node_name},
            "reportingComponent": "kubelet",
            "reportingInstance": self.node_name,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self.kube.post(f"/api/v1/namespaces/{self.namespace}/events", event)
        except Exception as exc:
            log.debug(
                "event %s for %s/%s not recorded: %s", reason, self.namespace, self.involved["name"], exc
            )
