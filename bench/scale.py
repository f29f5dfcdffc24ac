"""Scale benchmark on the local cluster with the real brokers (``hybridmq mm|cm`` pods).

Default mode, a large cluster's failover: a BrokerCluster of 3 MMs and 1 CM with ``--partitions``
fixed partitions of 2 replicas, a few producer processes (``bench/scale_producers.py``) each
covering many partitions at a low rate (one message per ``--interval`` per partition), then
``kill -9`` of the MM that leads the most partitions. Measured, from the kill:

* ``all_primaries_s``: until a watch shows every partition it led with a new primary at a higher
  epoch;
* ``first_ack_p99_s`` (and max): per producer, until its first acknowledged message after the kill;
  a producer without one by the end of the window counts as beyond it (the figure reads ``>W``),
  and ``producers_without_ack`` says how many;
* ``operator_cpu_s``: CPU seconds the operator process used from the kill until every producer had
  its first ack; ``api_requests``: requests the kube-apiserver served in that window (all clients:
  operator, brokers, node agent; from its ``apiserver_request_total``);
* ``redundant_s``: until every partition that had a copy on the killed MM was seen with fewer than
  two in-sync copies and then with two again (replacement copies caught up; ``--local``: seen in
  the controller's table with two in-sync copies, the killed MM no longer among its replicas);
* per MM, before the kill: open file descriptors and RSS;
* ``brokers_cpu_before``: the cores the broker processes (MMs and CM) used over the
  ``--busy-window`` seconds just before the kill, and ``saturated``: whether they (or the machine's
  run queue) had already used up the machine then (at least ``SATURATED_SHARE`` of its cores, or a
  one-minute load of twice its cores). A failover on a saturated machine queues behind the
  traffic: its timings say how loaded the machine was, not how fast failover is, so the last line
  then reads ``saturated`` in their place (the JSON record keeps them).

``--local``: the same failover without Kubernetes: ``hybridmq local`` (real MM and CM processes, the
local controller, which applies the operator's planner in this process, failure detection by a
``--local-lease`` second heartbeat lease). ``all_primaries_s`` is then when the controller's table
names every new primary, ``operator_cpu_s`` the CPU of this process (the controller's, and this
bench's polling of its table), ``api_requests`` ``n/a``.

``--steady SECONDS``: the operator at rest with ``--partitions`` Partition resources (stand-in
brokers unless ``HYBRIDMQ_TEST_BROKER=real``): its RSS (the most seen), CPU per second, the API
requests per second and its full and skipped rounds over that time. The window starts once the
operator has applied no change for ``--settle-quiet`` seconds (after placement it still writes
each partition's first reported figures, a few a round), plus ``--warmup``.

Attaches to ``$LOCALCLUSTER_DIR`` when set, otherwise starts (and stops) a cluster of its own. The
last line is ``partitions=… all_primaries_s=… first_ack_p99_s=… operator_cpu_s=… api_requests=…``
(``--steady``: ``partitions=… operator_rss_mb=… operator_cpu_pct=… api_requests_per_s=…``); a
JSON record (with the machine's load, ``bench/_results.py``) is appended to
``bench/results/scale.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psutil
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "hack"), str(REPO / "tests/k8s"), str(REPO / "bench")]

import _results  # noqa: E402
from kubernetes import watch  # noqa: E402
from kubernetes.client.exceptions import ApiException  # noqa: E402
from operator_failover import PrimaryWatch, bench_cluster  # noqa: E402
from operator_harness import (  # noqa: E402
    GROUP,
    VERSION,
    Kube,
    OperatorProcess,
    apply_crds,
    sample_cluster,
    teardown,
    wait_for,
)

from hybridmq.api.resources import LABEL_CLUSTER, BrokerClusterSpec  # noqa: E402
from hybridmq.local.runner import LocalCluster as BrokerOnlyCluster  # noqa: E402
from localcluster import LocalCluster  # noqa: E402

NAME = "scale"
FAILOVER_SUMMARY = (
    "partitions",
    "all_primaries_s",
    "first_ack_p99_s",
    "redundant_s",
    "operator_cpu_s",
    "api_requests",
    "producers_without_ack",
)
TIMED = ("all_primaries_s", "first_ack_p99_s", "redundant_s")  # not reported from a saturated machine
SATURATED_SHARE = 0.9  # of the machine's cores, used by the brokers before the kill

STEADY_SUMMARY = ("partitions", "operator_rss_mb", "operator_cpu_pct", "api_requests_per_s")


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def apiserver_requests(cluster: LocalCluster) -> int:
    """Requests the kube-apiserver has answered since it started (every verb, every client)."""
    text = cluster.kubectl("get", "--raw", "/metrics").stdout
    total = 0.0
    for line in text.splitlines():
        if line.startswith("apiserver_request_total{"):
            total += float(line.rsplit(" ", 1)[1])
    return int(total)


def operator_cpu(op: OperatorProcess) -> float:
    assert op.proc is not None
    t = psutil.Process(op.proc.pid).cpu_times()
    return float(t.user + t.system)


def operator_rss_mb(op: OperatorProcess) -> float:
    assert op.proc is not None
    return float(psutil.Process(op.proc.pid).memory_info().rss) / 2**20


def operator_counter(op: OperatorProcess, name: str) -> dict[str, float]:
    """One of the operator's counters from its metrics endpoint, by its ``kind`` label."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(op.http_get(op.metrics_port, "/metrics")):
        for sample in family.samples:
            if sample.name == name:
                kind = sample.labels.get("kind", "")
                out[kind] = out.get(kind, 0.0) + sample.value
    return out


def wait_settled(op: OperatorProcess, quiet_s: float, timeout: float) -> float:
    """Until the operator has applied no change for ``quiet_s`` (after placement it still writes
    each partition's first reported figures, a few per round): the steady state starts there.
    Returns the seconds waited."""
    t0 = time.monotonic()
    last, since = -1.0, t0
    while time.monotonic() - t0 < timeout:
        changes = sum(operator_counter(op, "hybridmq_operator_changes_total").values())
        now = time.monotonic()
        if changes != last:
            last, since = changes, now
        elif now - since >= quiet_s:
            return now - t0
        time.sleep(1.0)
    raise RuntimeError(f"the operator still applied changes {timeout:.0f}s after placement")


def cluster_body(
    partitions: int, mms: int, cms: int, min_in_sync: int, tls: bool, lease_s: int
) -> dict[str, Any]:
    body = sample_cluster(NAME, "", mms=mms, cms=cms, fixed=partitions)
    spec = body["spec"]
    spec["partitions"]["fixed"]["minInSync"] = min_in_sync
    spec["partitions"]["onDemand"]["perMessageManager"] = 0
    spec["tls"] = {"enabled": tls}
    # The kill is seen from the pod (its container terminated), not from the Lease: a long lease
    # keeps a loaded shared machine from failing over MMs that are only slow to renew.
    spec["failureDetection"] = {"leaseDurationSeconds": lease_s, "renewIntervalMilliseconds": 1000}
    return body


def fixed(kube: Kube, clusters: tuple[str, ...] = (NAME,)) -> list[dict[str, Any]]:
    """The fixed Partitions of ``clusters``, listed by their cluster label (not every Partition of
    the namespace: at 10,000 a list is 30 MB for the API server to send)."""
    out: list[dict[str, Any]] = []
    for cluster in clusters:
        items = kube.custom.list_namespaced_custom_object(
            GROUP, VERSION, kube.namespace, "partitions", label_selector=f"{LABEL_CLUSTER}={cluster}"
        )["items"]
        out.extend(p for p in items if p["spec"]["type"] == "fixed")
    return sorted(out, key=lambda p: p["metadata"]["name"])


def wait_placed(
    kube: Kube, partitions: int, replicas: int, timeout: float, clusters: tuple[str, ...] = (NAME,)
) -> None:
    def done() -> bool:
        try:
            parts = fixed(kube, clusters)
        except ApiException as exc:
            if exc.status is None or exc.status < 500:
                raise
            # A list of 10,000 Partitions can time out on an API server busy placing them.
            print(f"listing the Partitions: {exc.status} {exc.reason}; trying again", flush=True)
            return False
        return len(parts) == partitions and all(
            (p.get("status") or {}).get("primary")
            and len((p.get("status") or {}).get("inSync") or []) >= replicas
            for p in parts
        )

    wait_for(done, timeout, f"{partitions} partitions placed with {replicas} in-sync copies", interval=2.0)


def mm_resources(cluster: LocalCluster, ns: str, mms: list[str]) -> dict[str, dict[str, float]]:
    out = {}
    for mm in mms:
        pid = cluster.container_pid(ns, mm, "mm")
        if pid is None:
            continue
        proc = psutil.Process(pid)
        out[mm] = {"fds": proc.num_fds(), "rss_mb": round(proc.memory_info().rss / 2**20, 1)}
    return out


def busy_before(procs: dict[str, psutil.Process], seconds: float) -> dict[str, Any]:
    """The cores each broker process used over the next ``seconds``, their sum, and whether the
    machine was saturated (see the module docstring)."""
    before = _results.cpu_seconds(procs)
    time.sleep(seconds)
    each = {n: round((used - before[n]) / seconds, 2) for n, used in _results.cpu_seconds(procs).items()}
    total = round(sum(each.values()), 2)
    cores = psutil.cpu_count() or 1
    saturated = total >= SATURATED_SHARE * cores or os.getloadavg()[0] >= 2 * cores
    print(
        f"brokers before the kill: {total} cores in all ({', '.join(f'{n} {c}' for n, c in each.items())}) "
        f"on {cores}, load {load()}"
        + (": SATURATED, the failover timings will not be reported" if saturated else ""),
        flush=True,
    )
    return {"brokers_cpu_before": total, "brokers_cpu_each": each, "saturated": saturated}


def summary(record: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """The last line's figures: a saturated run's timings read ``saturated``."""
    out = {k: "saturated" if record.get("saturated") and k in TIMED else record[k] for k in keys}
    if "saturated" in record:
        out |= {"brokers_cpu_before": record["brokers_cpu_before"], "saturated": record["saturated"]}
    return out


class MapWatch:
    """When the assignment map (what the brokers act on) first named every given partition at a
    higher epoch than given, on another primary."""

    def __init__(self, kube: Kube, epochs: dict[str, int], victim: str) -> None:
        self.kube, self.epochs, self.victim = kube, epochs, victim
        self.at: float | None = None
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _done(self, obj: Any) -> bool:
        text = ((obj or {}).get("data") or {}).get("assignments.json") or "{}"
        parts = json.loads(text).get("partitions") or {}
        for name, epoch in self.epochs.items():
            st = (parts.get(name) or {}).get("status") or {}
            if st.get("epoch", -1) <= epoch or st.get("primary") in (None, self.victim):
                return False
        return True

    def _run(self) -> None:
        w = watch.Watch()
        while not self._stop.is_set() and self.at is None:
            # A function without a docstring: the watch hands over the raw objects.
            for ev in w.stream(self._raw_list, timeout_seconds=30):
                if self._done(ev["object"]):
                    self.at = time.monotonic()
                    return
                if self._stop.is_set():
                    return

    def _raw_list(self, **kw: Any) -> Any:
        return self.kube.core.list_namespaced_config_map(
            self.kube.namespace, field_selector=f"metadata.name={NAME}-assignments", **kw
        )

    def stop(self) -> None:
        self._stop.set()


class RedundancyWatch:
    """When every partition that had a copy on the lost MM was seen with fewer than two in-sync
    copies and then with two again (Kafka's under-replicated partitions back at 0): replacement
    copies on the survivors caught up, or the lost MM's own copies once it is back."""

    def __init__(self, affected: set[str]) -> None:
        self.pending, self.dipped = set(affected), set[str]()
        self.armed = False
        self.at: float | None = None
        self.done = threading.Event()

    def event(self, name: str, status: dict[str, Any], at: float) -> None:
        if not self.armed or name not in self.pending:
            return
        if len(status.get("inSync") or []) < 2:
            self.dipped.add(name)
        elif name in self.dipped:
            self.pending.discard(name)
            if not self.pending:
                self.at = at
                self.done.set()


class Producers:
    """``count`` producer processes sharing the partitions round-robin."""

    def __init__(
        self, bootstrap: str, names: list[str], count: int, interval: float, directory: Path
    ) -> None:
        self.procs: list[tuple[subprocess.Popen[str], Path]] = []
        for i in range(count):
            out = directory / f"producer-{i}.json"
            proc = subprocess.Popen(
                [
                    sys.executable,
                    str(REPO / "bench/scale_producers.py"),
                    "--bootstrap",
                    bootstrap,
                    "--interval",
                    str(interval),
                    "--out",
                    str(out),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            assert proc.stdin is not None
            proc.stdin.write("\n".join(names[i::count]) + "\n")
            proc.stdin.close()
            self.procs.append((proc, out))

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for proc, _ in self.procs:
            assert proc.stdout is not None
            line = proc.stdout.readline()  # blocks until "ready" (or EOF if it died)
            if line.strip() != "ready" or time.monotonic() > deadline:
                raise RuntimeError(f"producer process not ready: {line!r}")

    def stop(self) -> dict[str, list[float]]:
        acks: dict[str, list[float]] = {}
        for proc, _ in self.procs:
            proc.terminate()
        for proc, out in self.procs:
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if out.exists():
                acks.update(json.loads(out.read_text()))
        return acks


def first_acks(acks: dict[str, list[float]], t0: float) -> dict[str, float | None]:
    return {name: next((t - t0 for t in times if t > t0), None) for name, times in acks.items()}


def first_ack_figures(firsts: dict[str, float | None], victims: list[str], window_s: float) -> dict[str, Any]:
    """Percentiles over every producer (nearest rank). A producer without an ack within the window
    counts as beyond it, so the tail that did not recover is not left out of the p99: a figure it
    decides reads ``">W"`` (W the window in seconds)."""

    def rank(values: list[float], q: float) -> float | str | None:
        if not values:
            return None
        ordered = sorted(values)
        v = ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]
        return round(v, 3) if math.isfinite(v) else f">{window_s:.1f}"

    every = [math.inf if v is None else v for v in firsts.values()]
    of_victims = [math.inf if firsts[n] is None else float(firsts[n] or 0) for n in victims if n in firsts]
    return {
        "first_ack_p50_s": rank(every, 0.5),
        "first_ack_p99_s": rank(every, 0.99),
        "first_ack_max_s": rank(every, 1.0),
        "victim_first_ack_p99_s": rank(of_victims, 0.99),
        "producers_without_ack": sum(1 for v in firsts.values() if v is None),
    }


def failover(cluster: LocalCluster, ns: str, args: argparse.Namespace, directory: Path) -> dict[str, Any]:
    kube = Kube(cluster, ns)
    body = cluster_body(args.partitions, args.mms, 1, args.min_in_sync, args.tls, args.lease_seconds)
    body["metadata"]["namespace"] = ns
    op = OperatorProcess(cluster, ns, broker="real").start()
    try:
        t_create = time.monotonic()
        kube.create(body)
        wait_for(lambda: len(kube.ready_pods("mm")) == args.mms or None, 300, "MMs Ready")
        wait_placed(kube, args.partitions, 2, args.place_timeout)
        wait_for(lambda: len(kube.ready_pods("cm")) == 1 or None, 600, "CM Ready")
        placed_s = time.monotonic() - t_create
        print(
            f"{args.partitions} partitions placed and in sync in {placed_s:.1f}s (load {load()})", flush=True
        )
        cm = next(b for b in kube.cluster(NAME)["status"]["brokers"] if b["role"] == "cm")
        names = sorted(p["metadata"]["name"] for p in fixed(kube))
        producers = Producers(cm["address"], names, args.producers, args.interval, directory)
        try:
            producers.wait_ready(300)
            print(f"{len(names)} producers acknowledged (load {load()})", flush=True)
            time.sleep(args.warmup)
            parts = fixed(kube)
            led: dict[str, list[str]] = {}
            for p in parts:
                led.setdefault(p["status"]["primary"], []).append(p["metadata"]["name"])
            victim = max(led, key=lambda m: len(led[m]))
            epochs = {p["metadata"]["name"]: p["status"]["epoch"] for p in parts}
            resources = mm_resources(cluster, ns, sorted(led))
            victims = led[victim]
            pw = PrimaryWatch(kube)
            rw = RedundancyWatch({p["metadata"]["name"] for p in parts if victim in p["status"]["replicas"]})
            pw.on_event = rw.event
            mw = MapWatch(kube, {n: epochs[n] for n in victims}, victim)
            time.sleep(1.0)
            brokers = {
                pod: psutil.Process(pid)
                for role in ("mm", "cm")
                for pod in kube.ready_pods(role)
                if (pid := cluster.container_pid(ns, pod, role)) is not None
            }
            busy = busy_before(brokers, args.busy_window)
            load_before = load()
            cpu0, req0 = operator_cpu(op), apiserver_requests(cluster)
            t0 = time.monotonic()
            rw.armed = True
            cluster.kill_container(ns, victim, "mm")

            def moved(seen: dict[str, dict[str, Any]]) -> bool:
                for n in victims:
                    st = seen.get(n, {}).get("status", {})
                    if st.get("epoch", -1) <= epochs[n] or st.get("primary") in (None, victim):
                        return False
                return True

            t1 = pw.wait(moved, 120)
            mw.stop()
            t_map = mw.at if mw.at is not None else t1
            print(
                f"{len(victims)} primaries of {victim}: in the assignment map after {t_map - t0:.3f}s, "
                f"in every Partition status after {t1 - t0:.3f}s",
                flush=True,
            )
            time.sleep(args.after)
        finally:
            window_s = time.monotonic() - t0
            acks = producers.stop()
        firsts = first_acks(acks, t0)
        got = [v for v in firsts.values() if v is not None]
        t_last = t0 + max(got) if got else time.monotonic()
        # CPU and requests up to the last producer's first ack (read now: the window is over).
        cpu1, req1 = operator_cpu(op), apiserver_requests(cluster)
        rw.done.wait(max(0.0, t0 + args.redundancy_timeout - time.monotonic()))
        pw.stop()
        print(
            f"{len(rw.dipped)} partitions lost a copy; every one back to two in-sync copies after "
            + (f"{rw.at - t0:.1f}s" if rw.at is not None else f"more than {args.redundancy_timeout:.0f}s"),
            flush=True,
        )
        return {
            "partitions": args.partitions,
            "mms": args.mms,
            "min_in_sync": args.min_in_sync,
            "lease_s": args.lease_seconds,
            "tls": args.tls,
            "interval_s": args.interval,
            "producer_processes": args.producers,
            "placed_s": round(placed_s, 1),
            "victim": victim,
            "victim_partitions": len(victims),
            # What the brokers act on (the assignment map, or the statuses if that came first).
            "all_primaries_s": round(min(t_map, t1) - t0, 3),
            "all_statuses_s": round(t1 - t0, 3),
            "redundant_s": round(rw.at - t0, 1) if rw.at is not None else f">{args.redundancy_timeout:.0f}",
            **first_ack_figures(firsts, victims, window_s),
            "operator_cpu_s": round(cpu1 - cpu0, 2),
            "api_requests": req1 - req0,
            "window_s": round(max(t_last, t1) - t0, 3),
            "mm_before_kill": resources,
            **busy,
            "load_before": load_before,
            "load_after": load(),
        }
    finally:
        teardown(kube, op, timeout=180)


class _PatientBrokers(BrokerOnlyCluster):
    """1,000 partitions take longer than the default start-up bound to be in sync on a loaded machine."""

    def wait_in_sync(self, timeout: float = 1200.0) -> None:
        super().wait_in_sync(timeout)


def local_failover(args: argparse.Namespace, directory: Path) -> dict[str, Any]:
    spec = BrokerClusterSpec.model_validate(
        {
            "partitions": {
                "fixed": {"count": args.partitions, "replicas": 2, "minInSync": args.min_in_sync},
                "onDemand": {"perMessageManager": 0},
            }
        }
    )
    me = psutil.Process()
    t_create = time.monotonic()
    cluster = _PatientBrokers(
        directory / "cluster",
        mms=args.mms,
        replicas=2,
        spec=spec,
        lease_s=args.local_lease,
        log_level=args.log_level,
    )
    with cluster:
        placed_s = time.monotonic() - t_create
        print(
            f"{args.partitions} partitions placed and in sync in {placed_s:.1f}s (load {load()})", flush=True
        )
        table = cluster.table()
        names = sorted(n for n, a in table.items() if a.type == "fixed")
        producers = Producers(cluster.bootstrap, names, args.producers, args.interval, directory)
        try:
            producers.wait_ready(600)
            print(f"{len(names)} producers acknowledged (load {load()})", flush=True)
            time.sleep(args.warmup)
            table = cluster.table()
            led: dict[str, list[str]] = {}
            for n in names:
                led.setdefault(str(table[n].primary), []).append(n)
            victim = max(led, key=lambda m: len(led[m]))
            victims = led[victim]
            epochs = {n: table[n].epoch for n in victims}
            copies = [n for n in names if victim in table[n].replicas]
            resources = {}
            for mm in cluster.mm_names:
                proc = psutil.Process(cluster.pid(mm))
                resources[mm] = {"fds": proc.num_fds(), "rss_mb": round(proc.memory_info().rss / 2**20, 1)}
            busy = busy_before(
                {n: psutil.Process(cluster.pid(n)) for n in [*cluster.mm_names, *cluster.cm_names]},
                args.busy_window,
            )
            load_before = load()
            cpu0 = sum(me.cpu_times()[:2])
            t0 = time.monotonic()
            cluster.kill_mm(victim, signal.SIGKILL)
            redundancy = TableRedundancy(cluster, copies, victim)
            print(f"kill -9 {victim} ({len(victims)} primaries) at {time.strftime('%H:%M:%S')}", flush=True)
            t1 = None
            while time.monotonic() - t0 < 120:
                now = cluster.table()
                if all(now[n].epoch > epochs[n] and now[n].primary not in (None, victim) for n in victims):
                    t1 = time.monotonic()
                    break
                time.sleep(0.02)
            if t1 is None:
                raise RuntimeError(f"the partitions {victim} led were not all reassigned within 120 s")
            print(f"{len(victims)} primaries of {victim}: in the table after {t1 - t0:.3f}s", flush=True)
            time.sleep(args.after)
        finally:
            window_s = time.monotonic() - t0
            acks = producers.stop()
        cpu1 = sum(me.cpu_times()[:2])
        # As on Kubernetes: the copies are waited for once the window's figures are taken.
        redundancy.done.wait(max(0.0, t0 + args.redundancy_timeout - time.monotonic()))
        redundancy.stop()
        redundant_at = redundancy.at
        print(
            f"{len(copies)} partitions lost a copy; every one back to two in-sync copies after "
            + (
                f"{redundant_at - t0:.1f}s"
                if redundant_at is not None
                else f"more than {args.redundancy_timeout:.0f}s"
            ),
            flush=True,
        )
    firsts = first_acks(acks, t0)
    return {
        "mode": "local",
        "partitions": args.partitions,
        "mms": args.mms,
        "min_in_sync": args.min_in_sync,
        "lease_s": args.local_lease,
        "interval_s": args.interval,
        "producer_processes": args.producers,
        "replica_fetch": os.environ.get("HYBRIDMQ_REPLICA_FETCH", "batch"),
        "placed_s": round(placed_s, 1),
        "victim": victim,
        "victim_partitions": len(victims),
        "all_primaries_s": round(t1 - t0, 3),
        "redundant_s": (
            round(redundant_at - t0, 1) if redundant_at is not None else f">{args.redundancy_timeout:.0f}"
        ),
        **first_ack_figures(firsts, victims, window_s),
        # This process during the window and the load after it (the controller runs in it).
        "operator_cpu_s": round(cpu1 - cpu0, 2),
        "api_requests": "n/a",
        "mm_before_kill": resources,
        **busy,
        "load_before": load_before,
        "load_after": load(),
    }


class TableRedundancy:
    """From its start (the kill), polls the controller's table until every partition of ``names``
    (each had a copy on ``victim``) was seen with two in-sync copies and ``victim`` no longer among
    its replicas: ``at`` is when, ``done`` is set then."""

    def __init__(self, cluster: BrokerOnlyCluster, names: list[str], victim: str) -> None:
        self.cluster, self.left, self.victim = cluster, set(names), victim
        self.at: float | None = None
        self.done = threading.Event()
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while self.left and not self._stop.is_set():
            table = self.cluster.table()
            victim = self.victim
            self.left = {n for n in self.left if victim in table[n].replicas or len(table[n].in_sync) < 2}
            if not self.left:
                self.at = time.monotonic()
                self.done.set()
                return
            self._stop.wait(0.05)

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(5)


def steady(cluster: LocalCluster, ns: str, args: argparse.Namespace) -> dict[str, Any]:
    """``--partitions`` over as many BrokerClusters as the CRD's 1,000 fixed partitions each need."""
    kube = Kube(cluster, ns)
    count = -(-args.partitions // 1000)
    names = tuple(f"{NAME}{i}" for i in range(count))
    op = OperatorProcess(cluster, ns).start()
    try:
        t_create = time.monotonic()
        # One BrokerCluster after the other: ten placing 1,000 partitions at once swamp an API server
        # on two shared cores (its answers take seconds, the stand-in MMs' Lease renewals lapse and
        # live MMs are failed over). The steady state measured is the same.
        for i, name in enumerate(names):
            body = cluster_body(
                args.partitions // count, args.mms, 0, args.min_in_sync, args.tls, args.lease_seconds
            )
            body["metadata"].update(name=name, namespace=ns)
            kube.create(body)
            wait_placed(kube, args.partitions // count, 2, args.place_timeout, (name,))
            print(f"{name} placed after {time.monotonic() - t_create:.1f}s ({i + 1}/{count})", flush=True)
        wait_placed(kube, args.partitions // count * count, 2, args.place_timeout, names)
        placed_s = time.monotonic() - t_create
        print(
            f"{args.partitions} partitions placed and in sync in {placed_s:.1f}s (load {load()})", flush=True
        )
        settled_s = wait_settled(op, args.settle_quiet, args.place_timeout)
        print(f"no change applied for {args.settle_quiet:.0f}s, {settled_s:.1f}s after placement", flush=True)
        time.sleep(args.warmup)
        load_before = load()
        rounds0 = operator_counter(op, "hybridmq_operator_rounds_total")
        cpu0, req0, t0 = operator_cpu(op), apiserver_requests(cluster), time.monotonic()
        rss: list[float] = []
        while time.monotonic() - t0 < args.steady:
            rss.append(operator_rss_mb(op))
            time.sleep(5)
        cpu1, req1, t1 = operator_cpu(op), apiserver_requests(cluster), time.monotonic()
        rounds1 = operator_counter(op, "hybridmq_operator_rounds_total")
        rss.append(operator_rss_mb(op))
        rounds = {k: int(rounds1.get(k, 0) - rounds0.get(k, 0)) for k in ("full", "skipped")}
        return {
            "mode": "steady",
            "broker": os.environ.get("HYBRIDMQ_TEST_BROKER", "stub"),
            "partitions": args.partitions // count * count,
            "clusters": count,
            "mms": args.mms,
            "placed_s": round(placed_s, 1),
            "settled_s": round(settled_s, 1),
            "rss_mb_settled": round(rss[0], 1),
            "seconds": round(t1 - t0, 1),
            "rounds": rounds,
            "operator_rss_mb": round(max(rss), 1),
            "operator_cpu_pct": round(100 * (cpu1 - cpu0) / (t1 - t0), 2),
            "api_requests_per_s": round((req1 - req0) / (t1 - t0), 1),
            "load_before": load_before,
            "load_after": load(),
        }
    finally:
        teardown(kube, op, timeout=600)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--mms", type=int, default=3)
    parser.add_argument("--producers", type=int, default=4, help="producer processes")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between sends per partition")
    parser.add_argument("--min-in-sync", type=int, default=1)
    parser.add_argument("--tls", action="store_true", help="TLS listeners (off: the bench measures failover)")
    parser.add_argument("--lease-seconds", type=int, default=10, help="failureDetection.leaseDurationSeconds")
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument(
        "--busy-window", type=float, default=3.0, help="seconds the brokers' CPU is measured before the kill"
    )
    parser.add_argument("--after", type=float, default=8.0, help="seconds of load after the reassignment")
    parser.add_argument("--place-timeout", type=float, default=1200.0)
    parser.add_argument(
        "--redundancy-timeout", type=float, default=300.0, help="seconds to wait for two in-sync copies again"
    )
    parser.add_argument("--steady", type=float, default=0.0, help="steady-state mode for this many seconds")
    parser.add_argument(
        "--settle-quiet", type=float, default=15.0, help="--steady: no change applied this long = settled"
    )
    parser.add_argument(
        "--local", action="store_true", help="hybridmq local and its controller, no Kubernetes"
    )
    parser.add_argument("--local-lease", type=float, default=1.0, help="--local: heartbeat lease seconds")
    parser.add_argument(
        "--logs",
        type=Path,
        help="--local: keep the brokers' logs (and data) in this directory, which must not exist",
    )
    parser.add_argument("--log-level", default="WARNING", help="--local: the brokers' log level")
    args = parser.parse_args()
    if args.local:
        load_before = _results.load_average()
        if args.logs is not None:
            args.logs.mkdir(parents=True)
            record = local_failover(args, args.logs)
        else:
            with tempfile.TemporaryDirectory(prefix="hmq-scale-local-") as tmp:
                record = local_failover(args, Path(tmp))
        _results.append(NAME, record, summary(record, FAILOVER_SUMMARY), load_before)
        return 0

    load_before = _results.load_average()
    cluster, existing = bench_cluster("hmq-scale-")
    ns = f"scale-{uuid.uuid4().hex[:5]}"
    try:
        apply_crds(cluster)
        cluster.create_namespace(ns)
        with tempfile.TemporaryDirectory(prefix="hmq-scale-producers-") as tmp:
            record = steady(cluster, ns, args) if args.steady else failover(cluster, ns, args, Path(tmp))
        # Kept before the cluster goes: a failing shutdown must not lose the figures.
        keys = STEADY_SUMMARY if args.steady else FAILOVER_SUMMARY
        _results.append(NAME, record, summary(record, keys), load_before)
    finally:
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        if not existing:
            cluster.down(keep_dir=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
