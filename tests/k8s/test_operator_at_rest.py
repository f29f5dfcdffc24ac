"""A BrokerCluster at rest: the operator's reconcile daemon neither plans nor polls, yet acts on a
change at once and fails over an MM whose Lease runs out no later than a busy daemon would.

One namespace, one operator and one BrokerCluster (stand-in brokers) with 10 s Leases renewed every
second, as large clusters use: with these, a daemon that slept through its events would be seconds
late, which is what the tests look for. The checks read /metrics and the API, as a user does.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from operator_harness import (
    Kube,
    OperatorProcess,
    module_fixtures,
    poll,
    sample_cluster,
    wait_cluster_up,
    wait_for,
)
from prometheus_client.parser import text_string_to_metric_families

from localcluster import LocalCluster

pytestmark = pytest.mark.cluster

NAME = "qt"
MMS, CMS, FIXED = 2, 1, 2
LEASE_S = 10

namespace, kube, operator, _cluster = module_fixtures("opquiet", NAME, MMS, CMS, FIXED)


@pytest.fixture(scope="module")
def cluster(kube: Kube, operator: OperatorProcess) -> Iterator[str]:
    body = sample_cluster(NAME, kube.namespace, mms=MMS, cms=CMS, fixed=FIXED)
    body["spec"]["failureDetection"] = {"leaseDurationSeconds": LEASE_S, "renewIntervalMilliseconds": 1000}
    kube.create(body)
    wait_cluster_up(kube, NAME, MMS, CMS)
    yield NAME


def rounds(operator: OperatorProcess) -> dict[str, float]:
    """hybridmq_operator_rounds_total of this cluster by kind (full, skipped)."""
    text = operator.http_get(operator.metrics_port, "/metrics")
    found = {"full": 0.0, "skipped": 0.0}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "hybridmq_operator_rounds_total" and sample.labels.get("cluster") == NAME:
                found[sample.labels["kind"]] = sample.value
    return found


def wait_at_rest(operator: OperatorProcess) -> None:
    """Until a round was skipped and no full round ran for 3 s."""

    def resting() -> bool:
        before = rounds(operator)
        time.sleep(3.0)
        after = rounds(operator)
        return after["full"] == before["full"] and after["skipped"] > 0

    wait_for(resting, 90, "the operator at rest (a skipped round, no full one for 3 s)")


def primaries(kube: Kube) -> dict[str, tuple[str | None, int]]:
    out = {}
    for p in kube.partitions():
        if p["spec"].get("cluster") == NAME and p["spec"]["type"] == "fixed":
            st = p.get("status") or {}
            out[p["metadata"]["name"]] = (st.get("primary"), int(st.get("epoch") or 0))
    return out


def test_a_cluster_at_rest_is_neither_planned_nor_polled(operator: OperatorProcess, cluster: str) -> None:
    wait_at_rest(operator)
    before = rounds(operator)
    time.sleep(12.0)
    after = rounds(operator)
    full, skipped = after["full"] - before["full"], after["skipped"] - before["skipped"]
    # A full round at least every 30 s (the safety bound), and besides it a wake-up only when a
    # Lease could have run out (renewed every second, each wake-up finds it renewed): one or two
    # in 12 s, where a round every 250 ms would be 48.
    assert full <= 1, (full, skipped)
    assert 1 <= full + skipped <= 4, (full, skipped)


def test_a_change_to_a_cluster_at_rest_is_acted_on_at_once(
    kube: Kube, operator: OperatorProcess, cluster: str
) -> None:
    """More fixed partitions on a quiet cluster: the BrokerCluster's watch event wakes the daemon,
    which creates them, and their own events wake it to place them, each without waiting out the
    quiet sleep (up to 10 s with these Leases, 30 s without Leases)."""
    took = []
    for count in range(FIXED + 1, FIXED + 4):
        wait_at_rest(operator)
        kube.patch_cluster(NAME, {"spec": {"partitions": {"fixed": {"count": count}}}})
        _, seconds = poll(
            lambda count=count: sum(1 for primary, _ in primaries(kube).values() if primary) == count,
            30,
            interval=0.05,
        )
        took.append(round(seconds, 2))
    assert max(took) < 3.0, took


def test_an_mm_lost_on_a_cluster_at_rest_fails_over_when_its_lease_ends(
    local_cluster: LocalCluster, kube: Kube, operator: OperatorProcess, cluster: str
) -> None:
    """The frozen MM's pod stays: only its Lease's end says it is lost, and the daemon, asleep,
    must wake for it. Measured from the Lease's end (its last renewal plus its duration)."""
    wait_at_rest(operator)
    before = primaries(kube)
    victim = next(primary for primary, _ in before.values() if primary)
    led = {n for n, (primary, _) in before.items() if primary == victim}
    local_cluster.kill_container(kube.namespace, victim, sig=signal.SIGSTOP)
    try:

        def moved() -> bool:
            now = primaries(kube)
            return all(now[n][0] not in (victim, None) and now[n][1] > before[n][1] for n in led)

        poll(moved, LEASE_S + 30, interval=0.05)
        seen = datetime.now().astimezone()
        lease: Any = kube.coord.read_namespaced_lease(victim, kube.namespace)
        ends = lease.spec.renew_time + timedelta(seconds=lease.spec.lease_duration_seconds or LEASE_S)
        late = (seen - ends).total_seconds()
        # A round every 250 ms would see it 0-0.25 s after the end, then write the statuses; the
        # quiet daemon wakes just after it. Seconds late would be a daemon sleeping through it.
        assert 0 <= late < 1.5, f"failed over {late:.2f} s after the Lease ended"
    finally:
        local_cluster.kill_container(kube.namespace, victim, sig=signal.SIGCONT)
    wait_cluster_up(kube, NAME, MMS, CMS)
