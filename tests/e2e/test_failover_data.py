"""The data path through an operator-driven failover, with the real broker on the local cluster.

3 replicated MMs (``hybridmq mm`` → ``hybridmq.broker.kube_wiring``: Kubernetes assignments, Lease
renewal carrying the MM report), 1 CM, fixed partitions with 2 replicas, 1 on-demand partition per
MM. Producers (fixed and on-demand, with send logs) and a consumer go through ``hybridmq.client``
to the CM's pod IP. Deleting the primary MM pod of a fixed partition under load: the partition gets
a new primary at epoch + 1, its producers continue on the same partition, no acknowledged message
is lost and the order holds; the on-demand producer moves, its old partition drains and its
resource is deleted; Events record each step.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import itertools
import logging
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "k8s"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "broker"))

from failover_workload import ConsumerLoad, ProducerLoad, StreamReader, check, stop_all, until, wait_consumed
from operator_harness import (
    Kube,
    OperatorProcess,
    sample_cluster,
    trust_cluster_ca,
    wait_for,
)

from hybridmq.client import Consumer, Fetcher, Producer
from localcluster import LocalCluster

pytestmark = pytest.mark.cluster

DEST = "queue:k8s-failover"
CLUSTER = "fo"


def _status(kube: Kube, name: str) -> dict[str, Any]:
    for p in kube.partitions():
        if p["metadata"]["name"] == name:
            return dict(p.get("status") or {})
    return {}


def _audit(bootstrap: str, send_logs: list[Path], tmp_path: Path) -> str:
    """The Spark audit of the fixed partitions' logs (read through the CM) against the fixed
    producers' send logs: no acknowledged (producer, sequence) missing, none stored twice. (The
    on-demand producer's first partition is gone by now: drained and deleted.)"""
    if importlib.util.find_spec("pyspark") is None:
        return "skipped (no pyspark)"
    argv = [sys.executable, "-m", "hybridmq.spark.audit", "--bootstrap", bootstrap]
    for log in send_logs:
        argv += ["--send-log", str(log)]
    argv += ["--report", str(tmp_path / "audit.json"), "--first-sequence", "0"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert done.returncode == 0, f"audit failed: {done.stdout[-3000:]}\n{done.stderr[-2000:]}"
    return lines[-1] if lines else "PASS"


def _dump(local_cluster: LocalCluster, kube: Kube, op: OperatorProcess) -> str:
    out = [op.log_text()[-3000:]]
    for pod in kube.pods():
        role = pod.metadata.labels["hybridmq.io/role"]
        log = local_cluster.container_log(kube.namespace, pod.metadata.name, role)
        if log is not None:
            out.append(f"--- {pod.metadata.name}\n{log.read_text(errors='replace')[-3000:]}")
    for p in kube.partitions():
        out.append(f"{p['metadata']['name']}: {p.get('status')}")
    return "\n".join(out)


def _bring_up(local_cluster: LocalCluster, kube: Kube, op: OperatorProcess, fixed: int, **spec: Any) -> str:
    """A BrokerCluster of 3 real MMs and 1 CM, every partition placed with 2 in-sync replicas;
    returns the CM's address (clients of this process verify it with the cluster's CA)."""
    kube.create(sample_cluster(CLUSTER, kube.namespace, mms=3, cms=1, fixed=fixed, **spec))
    try:
        wait_for(lambda: len(kube.ready_pods("mm")) == 3 or None, 180, "3 real MMs Ready")
        wait_for(lambda: len(kube.ready_pods("cm")) == 1 or None, 180, "1 real CM Ready")
        # The MMs report their in-sync sets through their Leases: every fixed partition has both
        # replicas in sync, and there is one on-demand partition per MM.
        wait_for(
            lambda: (
                len(kube.by_type("fixed")) == fixed
                and all(len((p.get("status") or {}).get("inSync") or []) == 2 for p in kube.by_type("fixed"))
                and len(kube.by_type("on-demand")) == 3
                and all((p.get("status") or {}).get("primary") for p in kube.by_type("on-demand"))
            ),
            120,
            "fixed partitions with 2 in-sync replicas and 3 placed on-demand partitions",
        )
        brokers = kube.cluster(CLUSTER)["status"]["brokers"]
        wait_for(lambda: all(b["ready"] for b in kube.cluster(CLUSTER)["status"]["brokers"]), 60, "brokers")
    except AssertionError:
        print(_dump(local_cluster, kube, op))
        raise
    trust_cluster_ca(kube, CLUSTER, local_cluster.directory)
    return str(next(b for b in brokers if b["role"] == "cm")["address"])


def test_primary_pod_deleted_under_load_loses_nothing(
    local_cluster: LocalCluster, real: tuple[Kube, OperatorProcess], tmp_path: Path
) -> None:
    kube, op = real
    bootstrap = _bring_up(local_cluster, kube, op, fixed=2)
    asyncio.run(_bounded(_scenario(local_cluster, kube, op, bootstrap, tmp_path), 240))


def test_on_demand_partition_kept_for_a_paused_stream_reader(
    local_cluster: LocalCluster, real: tuple[Kube, OperatorProcess], caplog: pytest.LogCaptureFixture
) -> None:
    """The MM pod holding on-demand partitions is deleted while producers send and a consumer
    drains the queue; a stream reader of our own, paused across it, reads every acknowledged
    message once afterwards: the operator keeps the emptied partition for its retention."""
    kube, op = real
    caplog.set_level(logging.WARNING, logger="hybridmq.client")
    bootstrap = _bring_up(local_cluster, kube, op, fixed=0, retention_after_drain=120)
    asyncio.run(_bounded(_paused_reader_scenario(local_cluster, kube, op, bootstrap), 240))
    gone = [r.getMessage() for r in caplog.records if "is gone" in r.getMessage()]
    assert not gone, f"a moving producer found its old partition deleted: {gone[:2]}"


async def _paused_reader_scenario(
    local_cluster: LocalCluster, kube: Kube, op: OperatorProcess, bootstrap: str
) -> None:
    loads = [
        ProducerLoad(f"g{i}", await Producer.connect(bootstrap, partition_type="on-demand", linger_ms=1))
        for i in range(6)
    ]
    old = loads[0].producer.partition
    movers = [ld for ld in loads if ld.producer.partition == old]
    consumer = ConsumerLoad(await Consumer.connect(bootstrap, DEST))
    reader, fetcher = StreamReader(DEST), await Fetcher.connect(bootstrap, retry_s=60)
    stop_producing, stop_consuming = asyncio.Event(), asyncio.Event()
    tasks = [asyncio.create_task(consumer.run(stop_consuming))]
    producing = [asyncio.create_task(ld.run(DEST, stop_producing)) for ld in loads]
    try:
        # The MMs report the producers attached to each partition: `kubectl get hpart -o wide`.
        await until(lambda: _printed_producers(local_cluster, kube, old) == len(movers), 20, "PRODUCERS")
        await reader.catch_up(fetcher)  # the stream's last micro-batch before it is stopped
        await asyncio.sleep(0.5)
        victim = _status(kube, old)["primary"]
        await asyncio.to_thread(kube.core.delete_namespaced_pod, victim, kube.namespace)
        await until(lambda: _status(kube, old).get("state") == "Draining", 30, f"{old} draining")
        await until(lambda: all(ld.producer.partition != old for ld in movers), 30, "the producers moved")
        await asyncio.sleep(1.0)
        await stop_all(stop_producing, producing)
        await wait_consumed(loads, consumer, within=45)
        # Empty for everyone attached: the retention runs (drainedSince) - or it is deleted already.
        await until(
            lambda: _status(kube, old).get("drainedSince") or not _status(kube, old), 60, f"{old} empty"
        )
        await asyncio.sleep(3.0)  # the stream query is restarted a few seconds later
        await reader.catch_up(fetcher)
        assert all(ld.acked for ld in loads) and not any(ld.failed for ld in loads)
        reader.check(loads)
        assert any(p["metadata"]["name"] == old for p in kube.partitions()), f"{old} deleted too early"
    except BaseException:
        traceback.print_exc()
        print(_dump(local_cluster, kube, op))
        raise
    finally:
        stops = (stop_producing, stop_consuming)
        await _close(
            stops, [*(ld.producer for ld in loads), consumer.consumer, fetcher], [*producing, *tasks]
        )


def _printed_producers(local_cluster: LocalCluster, kube: Kube, name: str) -> int | None:
    """The PRODUCERS column of ``kubectl get hpart -o wide`` for partition ``name``."""
    out = local_cluster.kubectl("get", "hpart", "-n", kube.namespace, "-o", "wide").stdout.splitlines()
    header = out[0].split()
    for line in out[1:]:
        cells = line.split()
        if cells and cells[0] == name and len(cells) == len(header):
            return int(cells[header.index("PRODUCERS")])
    return None


async def _close(
    stops: tuple[asyncio.Event, ...], clients: list[Any], tasks: list[asyncio.Task[None]]
) -> None:
    for stop in stops:
        stop.set()
    for client in clients:
        with contextlib.suppress(Exception, TimeoutError):
            await asyncio.wait_for(client.close(), 5)
    await asyncio.wait(tasks, timeout=5)


async def _bounded(scenario: Any, within_s: float) -> None:
    task = asyncio.ensure_future(scenario)
    done, _ = await asyncio.wait([task], timeout=within_s)
    if not done:
        for t in asyncio.all_tasks():
            t.print_stack(limit=12)
        task.cancel()
        await asyncio.wait([task], timeout=10)
        raise AssertionError(f"the scenario did not finish in {within_s}s (task stacks above)")
    task.result()


async def _scenario(
    local_cluster: LocalCluster, kube: Kube, op: OperatorProcess, bootstrap: str, tmp_path: Path
) -> None:
    fixed_name = f"{CLUSTER}-fixed-0"
    before = _status(kube, fixed_name)
    victim = str(before["primary"])
    logs = tmp_path / "send-logs"
    logs.mkdir()

    loads = [
        ProducerLoad(
            "fx",
            await Producer.connect(
                bootstrap, partition_type="fixed", partition=fixed_name, send_log=logs / "fx.log"
            ),
        ),
        ProducerLoad(
            "fy",
            await Producer.connect(
                bootstrap, partition_type="fixed", partition=f"{CLUSTER}-fixed-1", send_log=logs / "fy.log"
            ),
        ),
    ]
    # An on-demand producer whose partition the victim leads.
    extra: list[Producer] = []
    od_producer = None
    for i in range(12):
        p = await Producer.connect(
            bootstrap, partition_type="on-demand", linger_ms=1, send_log=logs / f"od{i}.log"
        )
        if _status(kube, p.partition).get("primary") == victim:
            od_producer = p
            break
        extra.append(p)
    assert od_producer is not None, "no on-demand partition led by the victim"
    old_od = od_producer.partition
    od = ProducerLoad("od", od_producer)
    loads.append(od)

    consumer = ConsumerLoad(await Consumer.connect(bootstrap, DEST))
    stop_producing, stop_consuming = asyncio.Event(), asyncio.Event()
    consuming = asyncio.create_task(consumer.run(stop_consuming))
    producing = [asyncio.create_task(p.run(DEST, stop_producing)) for p in loads]
    loop = asyncio.get_running_loop()
    try:
        await asyncio.sleep(2.0)
        assert all(p.acked for p in loads), [(p.name, p.failed[:2]) for p in loads]
        deleted_at = loop.time()
        await asyncio.to_thread(kube.core.delete_namespaced_pod, victim, kube.namespace)

        def failed_over() -> bool:
            now = _status(kube, fixed_name)
            return now.get("primary") not in (None, victim) and now.get("epoch") == before["epoch"] + 1

        await until(failed_over, 30, f"{fixed_name} failed over")
        promoted_at = loop.time()
        reassigned_s = promoted_at - deleted_at
        after = _status(kube, fixed_name)
        assert after["primary"] in before["inSync"]
        # Acks before the status flip may still come from the old primary (until its pod gets
        # SIGTERM and fences): count from the first ack once the new primary is named.
        await until(lambda: any(x > promoted_at for x in loads[0].ack_times), 30, "an ack on fixed-0")
        first_ack_s = min(x for x in loads[0].ack_times if x > promoted_at) - deleted_at
        times = sorted(x for x in loads[0].ack_times if x > deleted_at - 1)
        max_gap_s = max((b - a for a, b in itertools.pairwise(times)), default=0.0)

        # Once both replicas are in sync again, lose the new primary too: the partition may now
        # go back to the restarted MM, which came back on a new pod IP (the CM follows it there).
        await until(lambda: len(_status(kube, fixed_name).get("inSync") or []) == 2, 60, "back in sync")
        second = _status(kube, fixed_name)
        deleted2_at = loop.time()
        await asyncio.to_thread(kube.core.delete_namespaced_pod, second["primary"], kube.namespace)
        await until(
            lambda: _status(kube, fixed_name).get("epoch") == second["epoch"] + 1, 30, "second failover"
        )
        promoted2_at = loop.time()
        await until(lambda: any(x > promoted2_at for x in loads[0].ack_times), 30, "an ack after it")
        first_ack2_s = min(x for x in loads[0].ack_times if x > promoted2_at) - deleted2_at
        await asyncio.sleep(3.0)
        await stop_all(stop_producing, producing)
        await wait_consumed(loads, consumer, within=45)

        # The on-demand producer moved; its old partition drains to zero and its resource goes.
        assert od.producer.partition != old_od
        await until(
            lambda: all(p["metadata"]["name"] != old_od for p in kube.partitions()),
            90,
            f"the old on-demand partition {old_od} drained and deleted",
        )
        await stop_all(stop_consuming, [consuming])
        figures = check(loads, consumer, ordered={"fx", "fy"})
        for load in loads[:2]:
            assert not load.failed, (load.name, load.failed[:3])
            assert load.partitions == {fixed_name if load.name == "fx" else f"{CLUSTER}-fixed-1"}
            assert load.acked_after(deleted_at + 0.1) > 0, f"{load.name} acked nothing after the deletion"
        assert od.acked_after(deleted_at + 0.1) > 0
        assert figures["acked"] > 100, figures
        assert (logs / "fx.log").stat().st_size > 0
        audit = await asyncio.to_thread(_audit, bootstrap, [logs / "fx.log", logs / "fy.log"], tmp_path)

        reasons = await asyncio.to_thread(kube.event_reasons)
        print(
            f"\nfailover: reassigned_s={reassigned_s:.2f} first_ack_s={first_ack_s:.2f} "
            f"max_ack_gap_s={max_gap_s:.2f} second: {second['primary']}->"
            f"{_status(kube, fixed_name).get('primary')} first_ack_s={first_ack2_s:.2f} "
            f"epoch {before['epoch']}->{after['epoch']} {victim}->{after['primary']} {figures} "
            f"od {old_od}->{od.producer.partition} audit: {audit} events {sorted(reasons)}"
        )
        assert {"Draining", "Drained", "PartitionDeleted"} <= reasons, reasons
        # A deleted pod's MM hands its primaries over (SIGTERM); if the operator sees the deletion
        # before the MM's request, it fails them over instead.
        assert reasons & {"FailedOver", "HandedOff"}, reasons
    except BaseException:
        traceback.print_exc()
        print(_dump(local_cluster, kube, op))
        raise
    finally:
        clients = [*(load.producer for load in loads), *extra, consumer.consumer]
        await _close((stop_producing, stop_consuming), clients, [*producing, consuming])
