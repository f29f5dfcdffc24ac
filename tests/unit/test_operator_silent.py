"""Handlers that see every watch event of their kind do not log a line per event; failures still show."""

from __future__ import annotations

import logging

import pytest

import hybridmq_operator.handlers  # noqa: F401  (registers every handler, as the operator does)


@pytest.mark.parametrize(
    "handler",
    [
        "mm_lease_changed",
        "partition_changed",
        "broker_statefulset_changed",
        "broker_cluster_changed",
        "broker_pod_changed",
        "partition_without_cluster",
    ],
)
def test_a_per_event_handler_logs_failures_but_not_successes(
    handler: str, caplog: pytest.LogCaptureFixture
) -> None:
    log = logging.getLogger("kopf.objects")
    with caplog.at_level(logging.DEBUG, logger="kopf.objects"):
        log.info("Handler '%s' succeeded.", handler)
        log.error("Handler '%s' failed with an exception. Will ignore.", handler)
        log.info("Handler 'reconcile_children' succeeded.")
    assert [r.getMessage() for r in caplog.records] == [
        f"Handler '{handler}' failed with an exception. Will ignore.",
        "Handler 'reconcile_children' succeeded.",
    ]
