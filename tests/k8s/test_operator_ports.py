"""The operator test harness keeps the operator's ports against the other programs of the machine.

``OperatorProcess`` picks the ports of the operator's metrics and liveness endpoints and the
operator binds them once it has started, seconds later on a loaded machine: another program
picking a free port meanwhile used to be offered the same numbers, and the operator then failed to
serve them. Here a squatter tries to serve both the moment the operator process is started.
"""

from __future__ import annotations

import urllib.error

from operator_harness import OperatorProcess, apply_crds, wait_for

from localcluster import LocalCluster
from localcluster.testing import let_go, squat


def test_operator_ports_are_not_served_by_another_program(
    local_cluster: LocalCluster, cluster_namespace: str
) -> None:
    apply_crds(local_cluster)
    operator = OperatorProcess(local_cluster, cluster_namespace).start()
    squatter, took = squat([operator.metrics_port, operator.liveness_port])

    def get(port: int, path: str) -> str | None:
        try:
            return operator.http_get(port, path)
        except (OSError, urllib.error.URLError):
            return None

    try:
        metrics = wait_for(lambda: get(operator.metrics_port, "/metrics"), 120, "the operator's metrics")
        assert "hybridmq_operator" in metrics
        assert wait_for(lambda: get(operator.liveness_port, "/healthz"), 120, "the operator's liveness")
        assert operator.alive()
    finally:
        let_go(squatter)
        operator.stop()
    assert took == []
