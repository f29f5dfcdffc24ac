"""``bench/rolling.py --operator``: the whole roll done by the operator on the local Kubernetes
cluster, triggered by the restart annotation, instead of SIGTERMs sent by the bench.

The local control plane (``hack/localcluster``; ``$LOCALCLUSTER_DIR`` to attach to a running one),
the operator as a process, a BrokerCluster of 3 real MMs and 1 CM, fixed partitions with 2 replicas
(``minInSync`` 2), no on-demand partitions, one steady producer per partition through the CM. After
``--before`` seconds of steady load, ``hybridmq.io/restartedAt`` is set; the operator moves each MM's
replicas off (graceful handoff of its primaries), deletes its pod, waits for the new pod Ready and
every partition in sync, then the next. The stall figures cover the MMs' part of the roll: the
producers stop once the last MM pod was replaced (the CM, restarted last, comes back on a new pod
IP the producers never knew). Then the roll must end ``Done``; a consumer and a log reader check
what was stored, as in the SIGTERM mode. There is no kill phase (``max_stall_ms_kill`` is null).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
import uuid
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


def _status(kube: Kube) -> dict[str, Any]:
    return dict(kube.cluster(CLUSTER).get("status") or {})


def _rolling(kube: Kube) -> dict[str, Any]:
    return next((c for c in _status(kube).get("conditions") or [] if c["type"] == "Rolling"), {})


def _bootstrap(kube: Kube) -> str:
    return ",".join(
        b["address"] for b in _status(kube).get("brokers") or [] if b["role"] == "cm" and b["ready"]
    )


def _settled(kube: Kube, fixed: int) -> bool:
    parts = [p.get("status") or {} for p in kube.by_type("fixed")]
    return (
        len(kube.ready_pods("mm")) == MMS
        and len(kube.ready_pods("cm")) == 1
        and len(parts) == fixed
        and all(sorted(s.get("replicas") or []) == sorted(s.get("inSync") or [1]) for s in parts)
        and _rolling(kube).get("reason") == "Done"
    )


async def _roll(kube: Kube, args: argparse.Namespace) -> dict[str, object]:
    names = sorted(p["metadata"]["name"] for p in kube.by_type("fixed"))
    bootstrap = _bootstrap(kube)
    producers, stop, tasks, t0 = await steady_load(bootstrap, names, args.rate, args.before)
    loop = asyncio.get_running_loop()
    roll_start = loop.time()
    kube.patch_cluster(
        CLUSTER, {"metadata": {"annotations": {"hybridmq.io/restartedAt": f"{time.time():.3f}"}}}
    )

    def mms_replaced() -> bool:
        return int((_status(kube).get("roll") or {}).get("messageManagersUpdated", 0)) == MMS

    await asyncio.to_thread(wait_for, lambda: _rolling(kube).get("status") == "True", 60, "Rolling")
    await asyncio.to_thread(wait_for, mms_replaced, 600, "every MM replaced")
    roll_end = loop.time()
    stop.set()
    await asyncio.gather(*tasks)
    await asyncio.to_thread(wait_for, lambda: _settled(kube, len(names)), 600, "the roll Done")
    took = loop.time() - roll_start
    for p in producers:
        await p.producer.close()
    bootstrap = _bootstrap(kube)
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
        body = sample_cluster(CLUSTER, ns, mms=MMS, cms=1, fixed=args.partitions)
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
