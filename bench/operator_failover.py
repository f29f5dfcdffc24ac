"""Operator failover benchmark on the local cluster.

* ``trials``: delete the MM pod that leads ``<cluster>-fixed-0`` and time, from the delete call,
  until the Partition status names a new primary (seen through a watch). p50/p99 over the trials.
  With the real broker (``HYBRIDMQ_TEST_BROKER=real``) a producer (``produce_probe.py``) sends to
  that partition through the CM all along, and the time from the delete call to its first
  acknowledged produce after the status names the new primary is measured too; with the default
  stand-in brokers it is reported as ``n/a``.
* ``reassign_1000_s``: a second BrokerCluster whose 1,000 fixed partitions are all led by one MM
  (placed while it was alone; a second MM then joins as their in-sync backup); delete that MM's
  pod and time until every one of them names the other MM as primary.

Usage: ``python bench/operator_failover.py [--trials 10] [--partitions 2000]``; attaches to
``$LOCALCLUSTER_DIR`` when set, otherwise starts (and stops) a cluster of its own. The last line is
``trials=… p50_s=… p99_s=… reassign_1000_s=…``; a JSON record is appended to
``bench/results/operator_failover.jsonl``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "hack"), str(REPO / "tests/k8s")]

import _results  # noqa: E402  (bench/, the script's directory)
from kubernetes import watch  # noqa: E402
from operator_harness import (  # noqa: E402
    GROUP,
    VERSION,
    Kube,
    OperatorProcess,
    apply_crds,
    sample_cluster,
    teardown,
    wait_cluster_up,
    wait_for,
)
from produce_probe import ProduceProbe  # noqa: E402

from localcluster import LocalCluster  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


class PrimaryWatch:
    """Records, per partition, when a watch event first showed each (primary, epoch)."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.seen: dict[str, dict[str, Any]] = {}
        # Called with (name, status, when) for every event, from the watch thread.
        self.on_event: Callable[[str, dict[str, Any], float], None] | None = None
        self.changed = threading.Condition()
        self._stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        w = watch.Watch()
        while not self._stop:
            for ev in w.stream(
                self.kube.custom.list_namespaced_custom_object,
                GROUP,
                VERSION,
                self.kube.namespace,
                "partitions",
                timeout_seconds=30,
            ):
                obj = ev["object"]
                name, status, at = obj["metadata"]["name"], obj.get("status") or {}, time.monotonic()
                with self.changed:
                    self.seen[name] = {"at": at, "status": status, "type": ev["type"]}
                    self.changed.notify_all()
                if self.on_event is not None:
                    self.on_event(name, status, at)
                if self._stop:
                    return

    def wait(self, predicate: Any, timeout: float) -> float:
        deadline = time.monotonic() + timeout
        with self.changed:
            while not predicate(self.seen):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("condition not reached")
                self.changed.wait(left)
            return time.monotonic()

    def stop(self) -> None:
        self._stop = True


def fixed_of(kube: Kube, cluster: str) -> list[dict[str, Any]]:
    return [p for p in kube.by_type("fixed") if p["spec"]["cluster"] == cluster]


def led_by(kube: Kube, cluster: str, mm: str) -> set[str]:
    return {
        p["metadata"]["name"] for p in fixed_of(kube, cluster) if (p.get("status") or {}).get("primary") == mm
    }


def real_broker() -> bool:
    return os.environ.get("HYBRIDMQ_TEST_BROKER") == "real"


def failover_trials(cluster: LocalCluster, ns: str, trials: int) -> tuple[list[float], list[float]]:
    kube = Kube(cluster, ns)
    name = "bench"
    kube.create(sample_cluster(name, ns, mms=3, cms=1, fixed=3))
    wait_cluster_up(kube, name, 3, 1, timeout=180)
    pw = PrimaryWatch(kube)
    times: list[float] = []
    produce_times: list[float] = []
    probe: ProduceProbe | None = None
    try:
        target = f"{name}-fixed-0"
        if real_broker():
            cm = next(b for b in kube.cluster(name)["status"]["brokers"] if b["role"] == "cm")
            probe = ProduceProbe(cm["address"], target).start()
        for i in range(trials):
            p = next(p for p in kube.partitions() if p["metadata"]["name"] == target)
            victim = p["status"]["primary"]
            epoch = p["status"]["epoch"]
            t0 = time.monotonic()
            kube.core.delete_namespaced_pod(victim, ns)

            def moved(seen: dict[str, dict[str, Any]], epoch: int = epoch, victim: str = victim) -> bool:
                st = seen.get(target, {}).get("status", {})
                return st.get("epoch", -1) > epoch and st.get("primary") not in (None, victim)

            t1 = pw.wait(moved, 30)
            times.append(t1 - t0)
            print(f"trial {i + 1}: {victim} lost, new primary after {t1 - t0:.3f}s", flush=True)
            if probe is not None:
                t2 = probe.first_ack_after(t1, 30)
                produce_times.append(t2 - t0)
                print(f"trial {i + 1}: first acknowledged produce after {t2 - t0:.3f}s", flush=True)
            wait_cluster_up(kube, name, 3, 1, timeout=180)
            wait_for(
                lambda: all(
                    len((q.get("status") or {}).get("inSync", [])) >= 2 for q in fixed_of(kube, name)
                ),
                60,
                "fixed partitions back in sync",
            )
    finally:
        pw.stop()
        if probe is not None:
            probe.stop()
    return times, produce_times


def reassign(cluster: LocalCluster, ns: str, partitions: int) -> tuple[int, float]:
    """``partitions`` fixed partitions all led by one MM (placed while it was the only MM, then a
    second MM joins and catches up as their backup); that MM is deleted."""
    kube = Kube(cluster, ns)
    name = "big"
    body = sample_cluster(name, ns, mms=1, cms=0, fixed=partitions)
    body["spec"]["partitions"]["onDemand"]["perMessageManager"] = 0
    kube.create(body)
    t_create = time.monotonic()

    def placed() -> bool:
        parts = fixed_of(kube, name)
        return len(parts) == partitions and all((p.get("status") or {}).get("primary") for p in parts)

    wait_for(placed, 900, f"{partitions} partitions placed")
    kube.patch_cluster(name, {"spec": {"messageManagers": {"replicas": 2}}})

    def in_sync() -> bool:
        parts = fixed_of(kube, name)
        return all(len((p.get("status") or {}).get("inSync", [])) == 2 for p in parts)

    wait_for(in_sync, 900, "every partition with 2 in-sync replicas")
    print(f"{partitions} partitions placed and replicated in {time.monotonic() - t_create:.1f}s", flush=True)
    victim = f"{name}-mm-0"
    led = led_by(kube, name, victim)
    pw = PrimaryWatch(kube)
    time.sleep(1.0)
    try:
        t0 = time.monotonic()
        kube.core.delete_namespaced_pod(victim, ns)

        def done(seen: dict[str, dict[str, Any]]) -> bool:
            return all(seen.get(n, {}).get("status", {}).get("primary") not in (None, victim) for n in led)

        t1 = pw.wait(done, 120)
    finally:
        pw.stop()
    return len(led), t1 - t0


def bench_cluster(prefix: str) -> tuple[LocalCluster, bool]:
    """The cluster at ``$LOCALCLUSTER_DIR`` (attached: True), else a new one, started."""
    existing = os.environ.get("LOCALCLUSTER_DIR")
    if existing:
        return LocalCluster.attach(existing), True
    cluster = LocalCluster(tempfile.mkdtemp(prefix=prefix))
    cluster.up()
    return cluster, False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=1000)
    args = parser.parse_args()

    cluster, existing = bench_cluster("hmq-bench-")
    load_before = _results.load_average()
    ns = f"bench-{uuid.uuid4().hex[:5]}"
    op: OperatorProcess | None = None
    try:
        apply_crds(cluster)
        cluster.create_namespace(ns)
        op = OperatorProcess(cluster, ns).start()
        times, produce_times = failover_trials(cluster, ns, args.trials)
        led, reassign_s = reassign(cluster, ns, args.partitions) if args.partitions else (0, float("nan"))
    finally:
        teardown(Kube(cluster, ns), op, timeout=120)
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        if not existing:
            cluster.down(keep_dir=False)
    p50, p99 = statistics.median(times), percentile(times, 0.99)
    figures = {
        "broker": os.environ.get("HYBRIDMQ_TEST_BROKER", "stub"),
        "trials": len(times),
        "status_p50_s": round(p50, 3),
        "status_p99_s": round(p99, 3),
        "status_max_s": round(max(times), 3),
        "produce_p50_s": round(statistics.median(produce_times), 3) if produce_times else None,
        "produce_p99_s": round(percentile(produce_times, 0.99), 3) if produce_times else None,
        "reassigned_partitions": led,
        "reassign_s": round(reassign_s, 3),
    }
    if produce_times:
        print(
            f"(deletion -> first acknowledged produce: p50 {figures['produce_p50_s']}s "
            f"p99 {figures['produce_p99_s']}s; {led} partitions reassigned)"
        )
    else:
        print(f"(deletion -> status; produce timing needs the real broker: n/a; {led} partitions reassigned)")
    summary = {"trials": len(times), "p50_s": f"{p50:.3f}", "p99_s": f"{p99:.3f}"}
    _results.append(
        "operator_failover",
        figures,
        {**summary, "reassign_1000_s": f"{reassign_s:.3f}"},
        load_before,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
