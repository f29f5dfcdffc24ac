"""Health-gated rolling restarts by the operator, with the real brokers on the local cluster.

One BrokerCluster of 3 real MMs and 2 CMs, fixed
partitions with 2 replicas, a 90 s lease. ``hybridmq.io/restartedAt`` on the BrokerCluster rolls
every broker pod while producers send to every fixed partition (through the MMs and the first CM;
they move to the other CM meanwhile): the test's own watch of the pods sees at most one MM and one
CM pod unavailable at any instant, every pod is replaced once, every send is acknowledged and a
consumer afterwards gets every acknowledged message, and ``Rolling`` ends ``Done`` with
``status.roll`` counting every pod and Events naming the steps.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import watch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "broker"))

from failover_workload import ConsumerLoad, ProducerLoad, check, stop_all, wait_consumed
from operator_harness import (
    Kube,
    OperatorProcess,
    apply_crds,
    forget_cluster_ca,
    sample_cluster,
    teardown,
    trust_cluster_ca,
    wait_for,
)

from hybridmq.client import Consumer, Producer
from localcluster import LocalCluster

pytestmark = pytest.mark.cluster

CLUSTER = "roll"
MMS, CMS, FIXED = 3, 2, 3
DEST = "queue:roll"
ROLL_TIMEOUT_S = 420  # three MMs moved off and restarted, two CMs, on 2 shared cores
RESTART = "hybridmq.io/restartedAt"
MARK = "hybridmq.io/roll"


@dataclass
class PodWatch:
    """The test's own record of the broker pods, from a watch: which pod objects (uids) existed
    under each name, and the most pods of a role unavailable (missing, unready or being deleted)
    at any one event."""

    kube: Kube
    uids: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    worst: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    worst_at: dict[str, str] = field(default_factory=dict)
    pods: dict[str, tuple[str, bool]] = field(default_factory=dict)  # name -> (role, available)
    stopped: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None

    def start(self) -> PodWatch:
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=15)

    def reset(self) -> None:
        self.worst.clear()
        self.worst_at.clear()

    def _record(self, kind: str, pod: Any) -> None:
        name, role = pod.metadata.name, pod.metadata.labels.get("hybridmq.io/role", "")
        if pod.metadata.uid not in self.uids[name]:
            self.uids[name].append(pod.metadata.uid)
        conds = {c.type: c.status for c in (pod.status.conditions or [])}
        available = conds.get("Ready") == "True" and pod.metadata.deletion_timestamp is None
        if kind == "DELETED":
            self.pods.pop(name, None)
        else:
            self.pods[name] = (role, available)
        for r, desired in (("mm", MMS), ("cm", CMS)):
            down = desired - sum(1 for rr, ok in self.pods.values() if rr == r and ok)
            if down > self.worst[r]:
                self.worst[r] = down
                self.worst_at[r] = f"{kind} {name}: {sorted(self.pods.items())}"

    def _run(self) -> None:
        selector = "app.kubernetes.io/managed-by=hybridmq-operator"
        version = None
        try:
            while not self.stopped.is_set():
                stream = watch.Watch().stream(
                    self.kube.core.list_namespaced_pod,
                    self.kube.namespace,
                    label_selector=selector,
                    resource_version=version,
                    timeout_seconds=5,
                )
                for event in stream:
                    self._record(event["type"], event["object"])
                    version = event["object"].metadata.resource_version
                    if self.stopped.is_set():
                        break
        except BaseException as exc:  # reported by the test
            self.error = exc


def rolling(kube: Kube) -> dict[str, Any]:
    conds = (kube.cluster(CLUSTER).get("status") or {}).get("conditions") or []
    return next((c for c in conds if c["type"] == "Rolling"), {})


def revisions_current(kube: Kube) -> bool:
    """Every broker pod at its StatefulSet's update revision (the test reads both itself)."""
    for role, count in (("mm", MMS), ("cm", CMS)):
        sts = kube.apps.read_namespaced_stateful_set(f"{CLUSTER}-{role}", kube.namespace)
        pods = [p for p in kube.pods(role) if p.metadata.deletion_timestamp is None]
        if len(pods) != count or (sts.status.observed_generation or 0) < sts.metadata.generation:
            return False
        if any(p.metadata.labels.get("controller-revision-hash") != sts.status.update_revision for p in pods):
            return False
    return True


def roll_done(kube: Kube, ready_mms: int = MMS) -> bool:
    return (
        rolling(kube).get("reason") == "Done"
        and revisions_current(kube)
        and len(kube.ready_pods("mm")) == ready_mms
        and len(kube.ready_pods("cm")) == CMS
    )


def request_restart(kube: Kube) -> str:
    stamp = f"{time.time():.3f}"
    kube.patch_cluster(CLUSTER, {"metadata": {"annotations": {RESTART: stamp}}})
    return stamp


def uids_now(kube: Kube) -> dict[str, str]:
    return {p.metadata.name: p.metadata.uid for p in kube.pods()}


def fixed_status(kube: Kube) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: dict(p.get("status") or {}) for p in kube.by_type("fixed")}


def in_sync(kube: Kube) -> bool:
    parts = fixed_status(kube)
    return len(parts) == FIXED and all(
        len(s.get("inSync") or []) == 2 and sorted(s.get("replicas") or []) == sorted(s.get("inSync") or [])
        for s in parts.values()
    )


@pytest.fixture(scope="module")
def env(local_cluster: LocalCluster) -> Iterator[tuple[Kube, OperatorProcess, PodWatch]]:
    apply_crds(local_cluster)
    ns = f"roll-{uuid.uuid4().hex[:5]}"
    local_cluster.create_namespace(ns)
    kube = Kube(local_cluster, ns)
    op = OperatorProcess(local_cluster, ns, broker="real")
    op.start()
    body = sample_cluster(CLUSTER, ns, mms=MMS, cms=CMS, fixed=FIXED)
    body["spec"]["failureDetection"] = {"leaseDurationSeconds": 90, "renewIntervalMilliseconds": 250}
    kube.create(body)
    pods = PodWatch(kube).start()
    try:
        wait_for(lambda: len(kube.ready_pods("mm")) == MMS or None, 240, "3 real MMs Ready")
        wait_for(lambda: len(kube.ready_pods("cm")) == CMS or None, 240, "2 real CMs Ready")
        wait_for(lambda: in_sync(kube), 120, "every fixed partition with 2 in-sync replicas")
        wait_for(lambda: roll_done(kube), 180, "Rolling=False (Done) on the new cluster")
        trust_cluster_ca(kube, CLUSTER, local_cluster.directory)
        yield kube, op, pods
    finally:
        pods.stop()
        forget_cluster_ca()
        teardown(kube, op)
        local_cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def _dump(local_cluster: LocalCluster, kube: Kube, op: OperatorProcess) -> str:
    described = local_cluster.kubectl("describe", "hbc", CLUSTER, "-n", kube.namespace, check=False).stdout
    pods = [(p.metadata.name, p.metadata.labels.get("controller-revision-hash")) for p in kube.pods()]
    return f"{described}\npods: {pods}\nparts: {fixed_status(kube)}\n{op.log_text()[-4000:]}"


def cm_bootstrap(kube: Kube) -> str:
    brokers = kube.cluster(CLUSTER)["status"]["brokers"]
    return ",".join(b["address"] for b in brokers if b["role"] == "cm" and b["ready"])


def mms_updated(kube: Kube) -> int:
    return int(
        ((kube.cluster(CLUSTER).get("status") or {}).get("roll") or {}).get("messageManagersUpdated", 0)
    )


def cms_updated(kube: Kube) -> int:
    roll = (kube.cluster(CLUSTER).get("status") or {}).get("roll") or {}
    return int(roll.get("connectionManagersUpdated", 0))


async def _roll_under_load(kube: Kube, pods: PodWatch) -> dict[str, int]:
    """Producers send through the MMs' roll and the first CM's restart (they move to the other
    CM); they stop before the second CM goes (a client knows the CMs it was given and the first
    one's replacement has a new pod IP). A consumer started after the roll reads everything."""
    bootstrap = cm_bootstrap(kube)
    loads = [
        ProducerLoad(
            f"f{i}",
            await Producer.connect(bootstrap, partition_type="fixed", partition=f"{CLUSTER}-fixed-{i}"),
        )
        for i in range(FIXED)
    ]
    stop_producing, stop_consuming = asyncio.Event(), asyncio.Event()
    producing = [asyncio.create_task(p.run(DEST, stop_producing, window=8, pause=0.01)) for p in loads]
    consumer: ConsumerLoad | None = None
    try:
        await asyncio.sleep(2.0)
        assert all(p.acked for p in loads), [(p.name, p.failed[:2]) for p in loads]
        before = uids_now(kube)
        pods.reset()
        started = time.monotonic()
        request_restart(kube)
        await asyncio.to_thread(wait_for, lambda: rolling(kube).get("status") == "True", 180, "Rolling=True")
        await asyncio.to_thread(
            wait_for, lambda: mms_updated(kube) == MMS, ROLL_TIMEOUT_S, "every MM replaced"
        )
        mms_done = time.monotonic()
        await asyncio.to_thread(wait_for, lambda: cms_updated(kube) >= 1, ROLL_TIMEOUT_S, "a CM replaced")
        await stop_all(stop_producing, producing)
        await asyncio.to_thread(wait_for, lambda: roll_done(kube), ROLL_TIMEOUT_S, "the roll Done")
        took = time.monotonic() - started
        after = uids_now(kube)
        assert all(after[n] != uid for n, uid in before.items()), (before, after)
        consumer = ConsumerLoad(await Consumer.connect(cm_bootstrap(kube), DEST))
        consuming = asyncio.create_task(consumer.run(stop_consuming))
        await wait_consumed(loads, consumer, within=120)
        await stop_all(stop_consuming, [consuming])
        figures = check(loads, consumer)
        for load in loads:
            assert not load.failed, (load.name, load.failed[:3])
            assert load.acked_after(started + (mms_done - started) / 2) > 0, f"{load.name}: no ack mid-roll"
            assert load.acked_after(mms_done) > 0, f"{load.name}: no ack while the first CM was replaced"
        print(f"\nroll under load: {took:.1f} s (MMs {mms_done - started:.1f} s), {figures}")
        return figures
    finally:
        for client in [*(p.producer for p in loads), *([consumer.consumer] if consumer else [])]:
            try:
                await asyncio.wait_for(client.close(), 5)
            except Exception:
                pass


def test_restart_annotation_rolls_every_pod_one_at_a_time_losing_nothing(
    local_cluster: LocalCluster, env: tuple[Kube, OperatorProcess, PodWatch]
) -> None:
    kube, op, pods = env
    try:
        figures = asyncio.run(_roll_under_load(kube, pods))
    except AssertionError:
        print(_dump(local_cluster, kube, op))
        raise
    assert pods.error is None, pods.error
    assert pods.worst["mm"] <= 1, f"{pods.worst['mm']} MMs down at once: {pods.worst_at['mm']}"
    assert pods.worst["cm"] <= 1, f"{pods.worst['cm']} CMs down at once: {pods.worst_at['cm']}"
    assert pods.worst["mm"] == 1 and pods.worst["cm"] == 1  # the watch did see the pods go
    assert figures["acked"] > 100, figures
    status = kube.cluster(CLUSTER)["status"]
    assert (
        status["roll"]["messageManagersUpdated"] == MMS and status["roll"]["connectionManagersUpdated"] == CMS
    )
    reasons = kube.event_reasons("BrokerCluster")
    assert {"RollMovingReplicas", "RollRestartingPod", "RollDone"} <= reasons, reasons
    described = local_cluster.kubectl("describe", "hbc", CLUSTER, "-n", kube.namespace).stdout
    assert "Rolling" in described and "RollRestartingPod" in described
