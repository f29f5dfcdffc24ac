"""Prometheus metrics of the operator, served on ``/metrics`` (``--metrics-address``)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram, start_http_server

FAILOVERS = Counter(
    "hybridmq_operator_failovers_total", "Primary changes written to Partition status", ["cluster"]
)
FAILOVER_SECONDS = Histogram(
    "hybridmq_operator_failover_duration_seconds",
    "From MM loss to the Partition status naming the new primary",
    ["cluster"],
    buckets=(0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0),
)
# Per MM (not per partition): from its loss, or its stop request, until every partition it led had
# a new primary (the BrokerCluster's status.failovers).
CLUSTER_FAILOVER_SECONDS = Histogram(
    "hybridmq_operator_cluster_failover_duration_seconds",
    "From an MM's loss (failover) or stop request (handoff) until every partition it led has a new primary",
    ["cluster", "kind"],
    buckets=(0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0),
)
HANDOFFS = Counter(
    "hybridmq_operator_handoffs_total",
    "Primaries handed over gracefully by a stopping MM (Partition status writes)",
    ["cluster"],
)
RECONCILE_SECONDS = Histogram(
    "hybridmq_operator_reconcile_seconds",
    "One partition reconcile round (observe, plan, apply)",
    ["cluster"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0),
)
ROUNDS = Counter(
    "hybridmq_operator_rounds_total",
    "Reconcile rounds: full, or skipped because nothing changed since a round that left the cluster settled",
    ["cluster", "kind"],
)
CHANGES = Counter("hybridmq_operator_changes_total", "Planner changes applied", ["cluster", "kind"])
CONFLICTS = Counter(
    "hybridmq_operator_write_conflicts_total", "Writes refused because the view was stale", ["cluster"]
)
ERRORS = Counter("hybridmq_operator_errors_total", "Failed reconcile rounds or writes", ["cluster"])
PARTITIONS = Gauge(
    "hybridmq_operator_partitions", "Partitions by type and state", ["cluster", "type", "state"]
)
LOST_MMS = Gauge("hybridmq_operator_lost_message_managers", "MMs currently considered lost", ["cluster"])
GARBAGE_COLLECTED = Counter(
    "hybridmq_operator_partitions_garbage_collected_total",
    "Drained on-demand partitions deleted",
    ["cluster"],
)


def serve(address: str) -> None:
    """Serve ``/metrics`` on ``host:port`` (port 0 or an empty address: don't serve)."""
    if not address:
        return
    host, _, port = address.rpartition(":")
    if int(port) == 0:
        return
    start_http_server(int(port), addr=host or "127.0.0.1")
