"""The labels of the nodes MM pods run on: what their failure domain (``topologyKey``) is.

Nodes are cluster-scoped and change labels rarely, so the operator reads each node an MM runs on
once and again every ``REFRESH_S`` (a GET in a worker thread; no watch, which a namespaced operator
could not hold). A node it cannot read has no labels: its MMs' domain is unknown, which the
``ReplicasSpreadAcrossDomains`` condition says.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping

import requests

from hybridmq_operator import kube

LOG = logging.getLogger(__name__)
REFRESH_S = 60.0


class NodeLabels:
    """Node name -> labels, as last read (rebuildable: losing it costs a few reads)."""

    def __init__(self, refresh_s: float = REFRESH_S) -> None:
        self.refresh_s = refresh_s
        self._labels: dict[str, dict[str, str]] = {}
        self._read_at: dict[str, float] = {}
        self._warned = False

    def stale(self, nodes: Iterable[str]) -> list[str]:
        """The nodes among ``nodes`` not read yet or not for ``refresh_s``."""
        now = time.monotonic()
        return sorted(
            {n for n in nodes if n and now - self._read_at.get(n, -self.refresh_s) >= self.refresh_s}
        )

    def read(self, nodes: Iterable[str]) -> None:
        """Read ``nodes`` (sync: call it in a worker thread)."""
        for name in nodes:
            self._read_at[name] = time.monotonic()
            try:
                body = kube.get("v1", "Node", None, name)
            except (kube.KubeError, requests.RequestException) as exc:
                if not self._warned:
                    LOG.warning("cannot read node %s (failure domains unknown): %s", name, exc)
                    self._warned = True
                continue
            if body is None:
                self._labels.pop(name, None)
            else:
                self._labels[name] = dict((body.get("metadata") or {}).get("labels") or {})

    @property
    def labels(self) -> Mapping[str, Mapping[str, str]]:
        return self._labels
