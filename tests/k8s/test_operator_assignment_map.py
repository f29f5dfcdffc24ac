"""A lost MM's primaries reach the brokers in one step (the assignment map), then the Partition
statuses follow; an operator that stopped between the two finishes the statuses from the map.

The operator runs as a process on the real API server; the MMs are the stand-in brokers
(``stub_broker.py``), whose ``/admin/assignments`` shows what a broker acts on: the assignments of
its ``KubeAssignmentSource``.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from operator_harness import Kube, OperatorProcess, apply_crds, sample_cluster, teardown, wait_for

from localcluster import LocalCluster

pytestmark = pytest.mark.cluster

NAME = "big"
PARTITIONS = 200
# From the kill to every survivor acting on the new primaries: "within seconds", generous for
# 2 cores shared by many test runs (the defect took ~1.5 s per 200 partitions on an idle machine,
# one status write after the other, and left the brokers with a partial view meanwhile).
BOUND_S = 30.0
# The operator's line for a map write, e.g. "wrote the assignment map in 0.032s: 666 entries ahead
# of their Partitions (334 primary changes, 332 in-sync removals), 666 of them new this round".
MAP_WRITTEN = re.compile(
    r"wrote the assignment map in [\d.]+s: \d+ entries ahead of their Partitions \((\d+) primary"
)


@pytest.fixture
def running(local_cluster: LocalCluster, cluster_namespace: str) -> Iterator[tuple[Kube, OperatorProcess]]:
    apply_crds(local_cluster)
    kube = Kube(local_cluster, cluster_namespace)
    op = OperatorProcess(local_cluster, cluster_namespace).start()
    try:
        yield kube, op
    finally:
        teardown(kube, op, timeout=180)


def statuses(kube: Kube) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: dict(p.get("status") or {}) for p in kube.by_type("fixed")}


def create_and_settle(kube: Kube) -> dict[str, dict[str, Any]]:
    body = sample_cluster(NAME, kube.namespace, mms=3, cms=0, fixed=PARTITIONS)
    body["spec"]["partitions"]["onDemand"]["perMessageManager"] = 0
    body["spec"]["tls"] = {"enabled": False}
    # The kill is seen from the pod (its container terminated), not from the Lease: a long lease
    # keeps a loaded shared machine from failing over MMs that are only slow to renew.
    body["spec"]["failureDetection"] = {"leaseDurationSeconds": 10, "renewIntervalMilliseconds": 1000}
    kube.create(body)

    def settled() -> dict[str, dict[str, Any]] | None:
        parts = statuses(kube)
        ok = len(parts) == PARTITIONS and all(
            s.get("state") == "Active" and len(s.get("inSync") or []) == 2 for s in parts.values()
        )
        return parts if ok and len(kube.ready_pods("mm")) == 3 else None

    parts: dict[str, dict[str, Any]] = wait_for(settled, 600, f"{PARTITIONS} partitions Active and in sync")
    return parts


def assignments(address: str) -> dict[str, dict[str, Any]]:
    with urllib.request.urlopen(f"http://{address}/admin/assignments", timeout=10) as resp:
        body: dict[str, dict[str, Any]] = json.loads(resp.read())
        return body


def test_a_lost_mms_primaries_reach_every_broker_at_once(
    local_cluster: LocalCluster, running: tuple[Kube, OperatorProcess]
) -> None:
    kube, op = running
    before = create_and_settle(kube)
    led = Counter(s["primary"] for s in before.values())
    victim = max(led, key=lambda m: led[m])
    lost = {n: int(s["epoch"]) for n, s in before.items() if s["primary"] == victim}
    assert len(lost) >= PARTITIONS // 4
    table = {b["name"]: b for b in kube.cluster(NAME)["status"]["brokers"]}
    survivors = {m: table[m]["httpAddress"] for m in table if m != victim and table[m]["role"] == "mm"}
    assert len(survivors) == 2

    def switched(view: dict[str, dict[str, Any]]) -> set[str]:
        return {
            n
            for n, epoch in lost.items()
            if view.get(n, {}).get("epoch") == epoch + 1 and view[n].get("primary") in survivors
        }

    # What each survivor acts on, before: the victim leads them all.
    for address in survivors.values():
        assert not switched(assignments(address))
    t0 = time.monotonic()
    local_cluster.kill_container(kube.namespace, victim, "mm")
    first_views: dict[str, int] = {}
    took: dict[str, float] = {}
    while len(took) < len(survivors):
        assert time.monotonic() - t0 < BOUND_S, f"after {BOUND_S}s: {first_views} of {len(lost)} switched"
        for mm, address in survivors.items():
            if mm in took:
                continue
            n = len(switched(assignments(address)))
            if n and mm not in first_views:
                first_views[mm] = n  # the first view that shows any of them moved
            if n == len(lost):
                took[mm] = time.monotonic() - t0
        time.sleep(0.01)
    # One step: the first view a broker had of the failover already held every lost primary.
    assert first_views == {mm: len(lost) for mm in survivors}, (first_views, len(lost))
    # The Partition resources follow, with what the brokers acted on.
    view = assignments(next(iter(survivors.values())))

    def followed() -> bool:
        now = statuses(kube)
        return all(
            now[n].get("epoch") == lost[n] + 1 and now[n].get("primary") == view[n]["primary"] for n in lost
        )

    wait_for(followed, 120, "Partition statuses at the new epochs")
    print(f"{len(lost)} primaries of {victim} on every survivor after {took}")
    # The operator says so: one map write carried every lost primary.
    written = [int(m.group(1)) for m in MAP_WRITTEN.finditer(op.log_text())]
    assert any(n >= len(lost) for n in written), (written, len(lost))


def test_an_operator_that_stopped_after_a_commit_finishes_it_from_the_map(
    local_cluster: LocalCluster, running: tuple[Kube, OperatorProcess]
) -> None:
    """An operator that died right after committing primary changes in the map, before writing
    any Partition status: the brokers act on the map all the same, and the next operator writes
    the committed assignment into the statuses instead of deciding anew. The commit is written
    here by hand, in the documented format, while no operator runs."""
    kube, op = running
    before = create_and_settle(kube)
    op.kill()
    table = {b["name"]: b for b in kube.cluster(NAME)["status"]["brokers"]}
    uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in kube.by_type("fixed")}
    moved = sorted(before)[:3]
    committed = {}
    for n in moved:
        st = before[n]
        backup = next(r for r in st["inSync"] if r != st["primary"])
        committed[n] = {
            "uid": uids[n],
            "status": {
                "state": "Active",
                "epoch": st["epoch"] + 1,
                "primary": backup,
                "replicas": [backup, st["primary"]],
                "inSync": [backup, st["primary"]],
            },
        }
    text = json.dumps({"version": 1, "partitions": committed})
    kube.core.create_namespaced_config_map(
        kube.namespace,
        {"metadata": {"name": f"{NAME}-assignments"}, "data": {"assignments.json": text}},
    )

    def brokers_act() -> bool:
        for mm in ("big-mm-0", "big-mm-1", "big-mm-2"):
            view = assignments(table[mm]["httpAddress"])
            for n, entry in committed.items():
                got = view.get(n) or {}
                if (got.get("epoch"), got.get("primary")) != (
                    entry["status"]["epoch"],
                    entry["status"]["primary"],
                ):
                    return False
        return True

    wait_for(brokers_act, 30, "every MM acting on the committed primaries, no operator running")
    # No status was written: the Partitions still show the old primaries.
    assert all(statuses(kube)[n]["epoch"] == before[n]["epoch"] for n in moved)
    successor = OperatorProcess(local_cluster, kube.namespace).start()
    seen: dict[str, set[tuple[int, str]]] = {n: set() for n in moved}
    try:

        def followed() -> bool:
            now = statuses(kube)
            for n in moved:
                seen[n].add((int(now[n]["epoch"]), str(now[n].get("primary"))))
            return all(int(now[n]["epoch"]) >= committed[n]["status"]["epoch"] for n in moved)

        wait_for(followed, 120, "statuses at the committed epochs")
        for n in moved:
            at_commit = {p for e, p in seen[n] if e == committed[n]["status"]["epoch"]}
            assert at_commit <= {committed[n]["status"]["primary"]}, (n, seen[n])
            assert all(e >= before[n]["epoch"] for e, _ in seen[n])
    finally:
        teardown(kube, successor, timeout=180)
