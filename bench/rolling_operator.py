"""``bench/rolling.py --operator``: the whole roll done by the operator on the local Kubernetes
cluster, triggered by the restart annotation, instead of SIGTERMs sent by the bench.

The local control plane (``hack/localcluster``; ``$LOCALCLUSTER_DIR`` to attach to a running one),
the operator as a process, a BrokerCluster of 3 real MMs and 2 CMs, fixed partitions with 2 replicas
(``minInSync`` 2), no on-demand partitions, one steady producer per partition through the CMs. After
``--before`` seconds of steady load, ``hybridmq.io/restartedAt`` is set; the operator moves each MM's
replicas off (graceful handoff of its primaries), deletes its pod, waits for the new pod Ready and
every partition in sync, then the next. The stall figures cover the MMs' part of the roll: the
producers stop once the last new MM pod is Ready (the CMs restart then: the producers move to the
other CM for the first one, but a CM comes back on a new pod IP they never knew). Then the roll
must end ``Done``; a consumer and a log reader check what was stored, as in the SIGTERM mode.
There is no kill phase (``max_stall_ms_kill`` is null).

Where the stall goes: the bench watches the MM pods itself (every 0.1 s) and splits the roll into
one phase per MM, from its mark (``hybridmq.io/roll``: its primaries are handed over now) to its
new pod Ready; ``phases`` gives each one's length, the longest stall of the sends made in it and
the mark-to-deletion time (replicas moving off). ``failures`` counts the failed sends by reason.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "hack"), str(REPO / "tests/k8s")]

from operator_harness import (  # noqa: E402
    Kube,
    OperatorProcess,
    apply_crds,
    forget_cluster_ca,
    sample_cluster,
    teardown,
    trust_cluster_ca,
    wait_for,
)
from rolling import consume_all, percentile, read_logs, steady_load, verdict  # noqa: E402

from localcluster import LocalCluster as KubeCluster  # noqa: E402

CLUSTER = "rollbench"
MMS = 3
CMS = 2  # the producers know both: the first CM restarted (right after the MMs) is survivable
MARK = "hybridmq.io/roll"


def _status(kube: Kube) -> dict[str, Any]:
    return dict(kube.cluster(CLUSTER).get("status") or {})


def _rolling(kube: Kube) -> dict[str, Any]:
    return next((c for c in _status(kube).get("conditions") or [] if c["type"] == "Rolling"), {})


def _bootstrap(kube: Kube) -> str:
    return ",".join(
        b["address"] for b in _status(kube).get("brokers") or [] if b["role"] == "cm" and b["ready"]
    )


def _fresh_bootstrap(kube: Kube) -> str | None:
    """The CM addresses once the status names the Ready CM pods' current IPs (the CM restarted last
    comes back on a new pod IP; the status may still list the old one for a round)."""
    ips = {p.status.pod_ip for p in kube.pods("cm") if p.metadata.name in kube.ready_pods("cm")}
    bootstrap = _bootstrap(kube)
    return bootstrap if ips and all(ip in bootstrap for ip in ips) else None


@dataclass
class MMTimeline:
    """What the bench saw of each MM pod, on the event loop's clock: when its old pod was marked
    and deleted, when its new pod was Ready."""

    before: dict[str, str]  # name -> uid of the pod before the roll
    marked: dict[str, float] = field(default_factory=dict)
    deleted: dict[str, float] = field(default_factory=dict)
    ready: dict[str, float] = field(default_factory=dict)

    def see(self, pods: list[Any], ready: set[str], now: float) -> None:
        for pod in pods:
            name, old = pod.metadata.name, pod.metadata.uid == self.before.get(pod.metadata.name)
            if old and (pod.metadata.annotations or {}).get(MARK):
                self.marked.setdefault(name, now)
            if old and pod.metadata.deletion_timestamp is not None:
                self.deleted.setdefault(name, now)
            if not old and name in ready:
                self.ready.setdefault(name, now)
        for name in set(self.before) - {p.metadata.name for p in pods}:
            self.deleted.setdefault(name, now)

    def phases(self, producers: list[Any]) -> list[dict[str, object]]:
        out: list[dict[str, object]] = []
        for name in sorted(self.ready, key=lambda n: self.ready[n]):
            start = self.marked.get(name, self.deleted.get(name, self.ready[name]))
            stalls = [x for p in producers for x in p.stalls_ms(start, self.ready[name])]
            out.append(
                {
                    "mm": name,
                    "s": round(self.ready[name] - start, 1),
                    "moving_s": round(self.deleted.get(name, start) - start, 1),
                    "max_stall_ms": round(max(stalls, default=0.0), 1),
                }
            )
        return out


async def _watch_mms(kube: Kube, timeline: MMTimeline, stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        pods = await asyncio.to_thread(kube.pods, "mm")
        ready = {
            p.metadata.name
            for p in pods
            if any(c.type == "Ready" and c.status == "True" for c in (p.status.conditions or []))
        }
        timeline.see(pods, ready, loop.time())
        await asyncio.sleep(0.1)


def _settled(kube: Kube, fixed: int) -> bool:
    parts = [p.get("status") or {} for p in kube.by_type("fixed")]
    return (
        len(kube.ready_pods("mm")) == MMS
        and len(kube.ready_pods("cm")) == CMS
        and len(parts) == fixed
        and all(sorted(s.get("replicas") or []) == sorted(s.get("inSync") or [1]) for s in parts)
        and _rolling(kube).get("reason") == "Done"
    )


async def _roll(kube: Kube, args: argparse.Namespace) -> dict[str, object]:
    names = sorted(p["metadata"]["name"] for p in kube.by_type("fixed"))
    bootstrap = _bootstrap(kube)
    timeline = MMTimeline({p.metadata.name: p.metadata.uid for p in kube.pods("mm")})
    producers, stop, tasks, t0 = await steady_load(bootstrap, names, args.rate, args.before)
    loop = asyncio.get_running_loop()
    watch_stop = asyncio.Event()
    watching = asyncio.create_task(_watch_mms(kube, timeline, watch_stop))
    roll_start = loop.time()
    kube.patch_cluster(
        CLUSTER, {"metadata": {"annotations": {"hybridmq.io/restartedAt": f"{time.time():.3f}"}}}
    )

    def mms_replaced() -> bool:
        return int((_status(kube).get("roll") or {}).get("messageManagersUpdated", 0)) == MMS

    await asyncio.to_thread(wait_for, lambda: _rolling(kube).get("status") == "True", 60, "Rolling")
    await asyncio.to_thread(wait_for, mms_replaced, 600, "every MM replaced")
    await asyncio.to_thread(wait_for, lambda: len(timeline.ready) == MMS, 600, "every new MM Ready")
    roll_end = loop.time()
    stop.set()
    watch_stop.set()
    await asyncio.gather(*tasks, watching)
    await asyncio.to_thread(wait_for, lambda: _settled(kube, len(names)), 600, "the roll Done")
    took = loop.time() - roll_start
    for p in producers:
        await p.producer.close()
    bootstrap = await asyncio.to_thread(wait_for, lambda: _fresh_bootstrap(kube), 120, "the new CM listed")
    want = {f"{p.name}:{n}" for p in producers for n, s in p.sent.items() if s.acked_at is not None}
    stored = await consume_all(bootstrap, want, 30)
    logs, dmq = await read_logs(bootstrap)
    before = [x for p in producers for x in p.stalls_ms(t0 + 0.5, roll_start)]
    during = [x for p in producers for x in p.stalls_ms(roll_start, roll_end)]
    failovers = _status(kube).get("failovers") or []
    return {
        **verdict(producers, stored, logs),
        "max_stall_ms": round(max(during, default=0.0), 1),
        "p99_ms_during": round(percentile(during, 0.99), 1),
        "p99_ms_before": round(percentile(before, 0.99), 1),
        "max_stall_ms_kill": None,
        "handoffs": sum(1 for f in failovers if f.get("kind") == "handoff"),
        "failovers_while_reading": None,
        "dmq": dmq,
        "mode": "operator",
        "roll_s": round(took, 1),
        "phases": timeline.phases(producers),
        "failures": dict(Counter(f.split(": ", 1)[-1][:80] for p in producers for f in p.failed)),
    }


def run_operator(args: argparse.Namespace) -> dict[str, object]:
    existing = os.environ.get("LOCALCLUSTER_DIR")
    cluster = KubeCluster.attach(existing) if existing else KubeCluster(tempfile.mkdtemp(prefix="hmq-roll-"))
    if not existing:
        cluster.up()
    ns = f"rollbench-{uuid.uuid4().hex[:5]}"
    op: OperatorProcess | None = None
    kube = Kube(cluster, ns)
    try:
        apply_crds(cluster)
        cluster.create_namespace(ns)
        op = OperatorProcess(cluster, ns, broker="real").start()
        body = sample_cluster(CLUSTER, ns, mms=MMS, cms=CMS, fixed=args.partitions)
        body["spec"]["partitions"]["onDemand"]["perMessageManager"] = 0
        kube.create(body)
        wait_for(lambda: _settled(kube, args.partitions), 300, "the cluster up, in sync, not rolling")
        trust_cluster_ca(kube, CLUSTER, cluster.directory)
        return asyncio.run(_roll(kube, args))
    finally:
        forget_cluster_ca()
        teardown(kube, op, timeout=120)
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        if not existing:
            cluster.down(keep_dir=False)
