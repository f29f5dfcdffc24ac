"""The operator's side of the assignment map (``hybridmq.api.assignment_map``): the one ConfigMap
per BrokerCluster that commits a round's primary changes in one request (sync: worker threads).

Only the operator writes it. Writes carry the ``resourceVersion`` of the map this operator last
read or wrote, so a second operator working from an older map gets 409 and reloads instead of
overwriting a newer commit.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from hybridmq.api import assignment_map
from hybridmq.api.assignment_map import MapEntry
from hybridmq_operator import kube
from hybridmq_operator.resources.common import metadata
from hybridmq_operator.settings import ClusterSettings

LOG = logging.getLogger(__name__)


class MapTooLarge(Exception):
    """The entries do not fit a ConfigMap: the Partition statuses alone are the commit."""


class MapStore:
    """The map of one BrokerCluster as this operator last read or wrote it."""

    def __init__(self, cluster: str, namespace: str) -> None:
        self.name = assignment_map.configmap_name(cluster)
        self.namespace = namespace
        self.entries: dict[str, MapEntry] = {}
        self.rv: str | None = None
        self.loaded = False

    def load(self) -> None:
        body = kube.get("v1", "ConfigMap", self.namespace, self.name)
        self.rv = None if body is None else str(body["metadata"]["resourceVersion"])
        text = ((body or {}).get("data") or {}).get(assignment_map.DATA_KEY)
        try:
            self.entries = assignment_map.decode(text)
        except assignment_map.AssignmentMapError as exc:
            # Unreadable (written by hand?): the Partition statuses are what stands; rewritten
            # at the next primary change.
            LOG.warning("%s: %s; ignoring it", self.name, exc)
            self.entries = {}
        self.loaded = True

    def write(self, settings: ClusterSettings, entries: Mapping[str, MapEntry]) -> None:
        """Commit ``entries`` (the whole map). Raises ``kube.KubeError`` (409: reload first) or
        ``MapTooLarge``."""
        text = assignment_map.encode(entries)
        if len(text) > assignment_map.MAX_BYTES:
            raise MapTooLarge(f"{len(entries)} entries take {len(text)} bytes")
        data = {assignment_map.DATA_KEY: text}
        try:
            if self.rv is None:
                body = kube.create(
                    {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "metadata": metadata(settings, self.name),
                        "data": data,
                    }
                )
            else:
                patch = {"metadata": {"resourceVersion": self.rv}, "data": data}
                body = kube.merge_patch("v1", "ConfigMap", self.namespace, self.name, patch)
        except kube.KubeError as exc:
            if exc.conflict or exc.not_found:
                self.loaded = False  # reload before the next commit
            raise
        self.rv = str(body["metadata"]["resourceVersion"])
        self.entries = dict(entries)
