"""Health-gated rolling restarts by the operator, with the real brokers on the local cluster.

One BrokerCluster of 3 real MMs and 2 CMs, fixed
partitions with 2 replicas, a 90 s lease so that a frozen MM stays a member while it falls behind.
In order:

1. ``hybridmq.io/restartedAt`` on the BrokerCluster rolls every broker pod while producers send to
   every fixed partition (through the MMs and the first CM; they move to the other CM meanwhile):
   the test's own watch of the pods sees at most one MM and one CM pod unavailable at any instant,
   every pod is replaced once, every send is acknowledged and a consumer afterwards gets every
   acknowledged message, and ``Rolling`` ends ``Done`` with ``status.roll`` counting every pod and
   Events naming the steps.
2. The same under load with the operator killed (SIGKILL) once an MM is replaced and another is
   not, and a new operator process started: the roll completes with the same checks.
3. The last MM to roll leading a partition whose backup is frozen out of sync: the roll waits,
   says ``WaitingForInSync`` naming the partition, touches no pod, and completes once it thaws.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
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
DEST = "queue:roll"  # each roll under load sends to a queue of its own, named after this one
ROLL_TIMEOUT_S = 420  # three MMs moved off and restarted, two CMs, on 2 shared cores
RESTART = "hybridmq.io/restartedAt"
# The operator handles a change of the BrokerCluster's annotations as it comes (its resync is once a
# minute, after 30 s without a change: a request it did not see would wait for that).
REQUEST_S = 15
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


def templates_stamped(kube: Kube, stamp: str) -> bool:
    """Both StatefulSets' pod templates carry the restart request ``stamp`` (read by the test)."""
    for role in ("mm", "cm"):
        sts = kube.apps.read_namespaced_stateful_set(f"{CLUSTER}-{role}", kube.namespace)
        if (sts.spec.template.metadata.annotations or {}).get(RESTART) != stamp:
            return False
    return True


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


def replaced_once(pods: PodWatch, before: dict[str, str], after: dict[str, str]) -> None:
    """Each pod replaced exactly once: its name saw the old uid, then only the new one."""
    for name, uid in before.items():
        seen = pods.uids[name]
        assert seen[seen.index(uid) + 1 :] == [after[name]], (name, seen)


def one_mm_replaced(kube: Kube, before: dict[str, str]) -> bool:
    """An MM pod replaced and Ready while another still runs its old pod (the test's own reads)."""
    ready = set(kube.ready_pods("mm"))
    now = {p.metadata.name: p.metadata.uid for p in kube.pods("mm")}
    replaced = [n for n, uid in now.items() if uid != before.get(n) and n in ready]
    return bool(replaced) and any(uid == before.get(n) for n, uid in now.items())


async def _roll_under_load(
    kube: Kube, pods: PodWatch, mid_roll: Callable[[], None] | None = None
) -> dict[str, int]:
    """Producers send through the MMs' roll and the first CM's restart (they move to the other
    CM); they stop before the second CM goes (a client knows the CMs it was given and the first
    one's replacement has a new pod IP). A consumer started after the roll reads everything.
    ``mid_roll`` runs once the first MM is replaced and Ready, before the last one is."""
    bootstrap = cm_bootstrap(kube)
    # The tests of this module share a cluster: what an earlier roll stored unacknowledged (sends
    # in flight when its producers stopped) must not reach this roll's consumer.
    dest = f"{DEST}-{uuid.uuid4().hex[:8]}"
    loads = [
        ProducerLoad(
            f"f{i}",
            await Producer.connect(bootstrap, partition_type="fixed", partition=f"{CLUSTER}-fixed-{i}"),
        )
        for i in range(FIXED)
    ]
    stop_producing, stop_consuming = asyncio.Event(), asyncio.Event()
    producing = [asyncio.create_task(p.run(dest, stop_producing, window=8, pause=0.01)) for p in loads]
    consumer: ConsumerLoad | None = None
    try:
        await asyncio.sleep(2.0)
        assert all(p.acked for p in loads), [(p.name, p.failed[:2]) for p in loads]
        before = uids_now(kube)
        pods.reset()
        started = time.monotonic()
        stamp = request_restart(kube)
        # Acted on at once: both pod templates carry the request well before the minute's resync.
        await asyncio.to_thread(wait_for, lambda: templates_stamped(kube, stamp), REQUEST_S, "restart seen")
        await asyncio.to_thread(wait_for, lambda: rolling(kube).get("status") == "True", 180, "Rolling=True")
        if mid_roll is not None:
            await asyncio.to_thread(
                wait_for,
                lambda: one_mm_replaced(kube, before),
                ROLL_TIMEOUT_S,
                "one MM replaced, one not yet",
            )
            await asyncio.to_thread(mid_roll)
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
        replaced_once(pods, before, after)
        consumer = ConsumerLoad(await Consumer.connect(cm_bootstrap(kube), dest))
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


def _checked_roll(
    local_cluster: LocalCluster,
    env: tuple[Kube, OperatorProcess, PodWatch],
    mid_roll: Callable[[], None] | None = None,
) -> dict[str, int]:
    """A roll under load (see ``_roll_under_load``), with the pod watch's verdict: never two MMs
    or two CMs unavailable at once, and each seen going."""
    kube, op, pods = env
    wait_for(lambda: roll_done(kube) and in_sync(kube), 120, "settled after the last roll")
    try:
        figures = asyncio.run(_roll_under_load(kube, pods, mid_roll))
    except AssertionError:
        print(_dump(local_cluster, kube, op))
        raise
    assert pods.error is None, pods.error
    assert pods.worst["mm"] <= 1, f"{pods.worst['mm']} MMs down at once: {pods.worst_at['mm']}"
    assert pods.worst["cm"] <= 1, f"{pods.worst['cm']} CMs down at once: {pods.worst_at['cm']}"
    assert pods.worst["mm"] == 1 and pods.worst["cm"] == 1  # the watch did see the pods go
    assert figures["acked"] > 100, figures
    return figures


def test_restart_annotation_rolls_every_pod_one_at_a_time_losing_nothing(
    local_cluster: LocalCluster, env: tuple[Kube, OperatorProcess, PodWatch]
) -> None:
    kube = env[0]
    _checked_roll(local_cluster, env)
    status = kube.cluster(CLUSTER)["status"]
    assert (
        status["roll"]["messageManagersUpdated"] == MMS and status["roll"]["connectionManagersUpdated"] == CMS
    )
    reasons = kube.event_reasons("BrokerCluster")
    assert {"RollMovingReplicas", "RollRestartingPod", "RollDone"} <= reasons, reasons
    described = local_cluster.kubectl("describe", "hbc", CLUSTER, "-n", kube.namespace).stdout
    assert "Rolling" in described and "RollRestartingPod" in described


def test_operator_killed_mid_roll_resumes_it(
    local_cluster: LocalCluster, env: tuple[Kube, OperatorProcess, PodWatch]
) -> None:
    """SIGKILL to the operator once an MM is replaced and another still runs its old pod; a new
    operator process finishes the roll from what the pods and Partitions say."""
    kube, op, _ = env
    halted: dict[str, str] = {}

    def restart_operator() -> None:
        op.kill()
        halted.update((p.metadata.name, p.metadata.uid) for p in kube.pods("mm"))
        time.sleep(3)
        op.start()

    before = uids_now(kube)
    _checked_roll(local_cluster, env, restart_operator)
    assert any(halted[n] == before[n] for n in halted), f"no MM left to roll at the kill: {halted}"
    assert any(halted[n] != before[n] for n in halted), f"no MM replaced before the kill: {halted}"


def test_a_roll_waits_while_the_last_mm_is_a_partitions_only_in_sync_copy_and_says_which(
    local_cluster: LocalCluster, env: tuple[Kube, OperatorProcess, PodWatch]
) -> None:
    """The roll (highest ordinal first) is held still by killing the operator the moment it deletes
    the second MM's pod: every partition is then on mm-0 (not rolled yet) and mm-2 (rolled). mm-2
    is frozen (SIGSTOP) and a partition led by mm-0 written to until mm-2 drops out of its in-sync
    set. A new operator process must not touch mm-0, the last MM to roll: its restart would leave
    that partition with no in-sync copy. ``Rolling`` says ``WaitingForInSync`` naming it, no pod is
    marked or deleted meanwhile, and once mm-2 is resumed the roll completes."""
    kube, op, pods = env
    wait_for(lambda: roll_done(kube) and in_sync(kube), 120, "settled after the last roll")
    last, second, frozen = (f"{CLUSTER}-mm-{i}" for i in range(3))
    before = uids_now(kube)
    request_restart(kube)

    def second_deleted() -> bool:
        pod = next((p for p in kube.pods("mm") if p.metadata.name == second), None)
        return (
            pod is None or pod.metadata.uid != before[second] or pod.metadata.deletion_timestamp is not None
        )

    wait_for(second_deleted, ROLL_TIMEOUT_S, f"the roll deleting {second}", interval=0.05)
    op.kill()
    try:
        assert uids_now(kube)[last] == before[last] and not roll_marked(kube, last), "the roll got past"
        name = next(
            (n for n, s in sorted(fixed_status(kube).items()) if s.get("primary") == last),
            None,
        )
        assert name is not None and frozen in fixed_status(kube)[name]["replicas"], fixed_status(kube)
        local_cluster.kill_container(kube.namespace, frozen, "mm", signal.SIGSTOP)
        try:
            wait_for(lambda: frozen not in kube.ready_pods("mm"), 60, f"{frozen} not Ready once frozen")
            op.start()
            asyncio.run(_send_some(kube, name))
            wait_for(
                lambda: (
                    rolling(kube).get("reason") == "WaitingForInSync" and name in rolling(kube)["message"]
                ),
                120,
                f"Rolling=WaitingForInSync naming {name}",
            )
            assert frozen not in fixed_status(kube)[name].get("inSync", []), fixed_status(kube)[name]
            waiting = uids_now(kube)
            time.sleep(5)  # several rounds: the operator would have acted by now
            cond = rolling(kube)
            assert (cond["status"], cond["reason"]) == ("True", "WaitingForInSync"), cond
            assert uids_now(kube) == waiting and waiting[last] == before[last], (waiting, uids_now(kube))
            assert not roll_marked(kube, last), "the last MM marked while its partition was out of sync"
        finally:
            local_cluster.kill_container(kube.namespace, frozen, "mm", signal.SIGCONT)
        wait_for(lambda: roll_done(kube), ROLL_TIMEOUT_S, f"the roll Done once {frozen} caught up")
    except AssertionError:
        print(_dump(local_cluster, kube, op))
        raise
    finally:
        if not op.alive():
            op.start()
    replaced_once(pods, before, uids_now(kube))


def roll_marked(kube: Kube, pod: str) -> bool:
    return any((p.metadata.annotations or {}).get(MARK) for p in kube.pods("mm") if p.metadata.name == pod)


async def _send_some(kube: Kube, partition: str) -> None:
    """Writes that leave the frozen backup behind: refusals or timeouts (too few copies in sync
    while the primary waits to drop it) are expected and do not matter here."""
    producer = await Producer.connect(cm_bootstrap(kube), partition_type="fixed", partition=partition)
    try:
        sends = [producer.send(DEST, b"s" * 1000) for _ in range(50)]
        await asyncio.wait_for(asyncio.gather(*sends, return_exceptions=True), 8)
    except TimeoutError:
        pass
    finally:
        # Its pending sends were cancelled: closing reports that, which does not matter here.
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await asyncio.wait_for(producer.close(), 5)
