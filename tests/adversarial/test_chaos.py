"""Seeded chaos under load, judged by the suite's own checker (``adv_checker``).

1 CM pair + 3 MMs (2 replicas, 3 fixed partitions, 1 on-demand per MM) under the local controller.
Fixed and on-demand producers write to a queue and a topic, two competing consumers (one fast, one
that holds each batch for 3 s, so the queue's cursor has acknowledged batches above it) read the queue,
a durable subscription reads the topic, and a producer streams multi-MiB messages to a queue of
their own, while MMs and CMs are killed (-9 and SIGTERM), frozen (SIGSTOP/SIGCONT) and restarted,
one at a time. Then the load stops, the consumers drain, every partition is read by offset and the
checker gives its verdicts (one key=value summary line).
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

import adv_settings
import adv_workload as w
import pytest
from adv_chaos import Chaos
from adv_checker import MUST_BE_ZERO, History, check, payload_id, summary_line

from hybridmq.local.runner import LocalCluster

QUEUE, TOPIC, LARGE = "queue:adv.q", "topic:adv.t", "queue:adv.large"
DURABLE = "adv-durable"
TOPIC_GROUP = f"{TOPIC}#{DURABLE}"


def _drained(h: History) -> bool:
    delivered = {(d.group, d.payload) for d in h.deliveries}
    small = all((s.group, payload_id(s.producer, s.n)) in delivered for s in h.sent if s.acked)
    large = {r.payload for r in h.large_receipts}
    return small and set(h.large_sent) <= large


async def _finish(tasks: list[asyncio.Task[None]], timeout_s: float) -> int:
    """Wait for tasks told to stop; cancel (and count) those that do not, re-raise a failure."""
    done, pending = await asyncio.wait(tasks, timeout=timeout_s)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    for task in done:
        task.result()
    return len(pending)


@pytest.mark.timeout(int(adv_settings.seconds(40)) + 900)
async def test_chaos_run(tmp_path: Path) -> None:
    seed, seconds, settle = adv_settings.seed(), adv_settings.seconds(40), adv_settings.settle_s()
    print(f"\nadversarial chaos: seed={seed} seconds={seconds} settle_s={settle}")
    rng = random.Random(seed)
    h = History()
    cluster = LocalCluster(
        tmp_path,
        mms=3,
        cms=2,
        replicas=2,
        fixed=3,
        on_demand_per_mm=1,
        mm_args=["--max-redeliveries", "1000"],
    )
    with cluster:
        bs = cluster.bootstraps
        stop_load, stop_consumers = asyncio.Event(), asyncio.Event()
        consumers = [
            asyncio.create_task(w.consume(h, bs, QUEUE, QUEUE, stop_consumers)),
            asyncio.create_task(w.consume(h, bs, QUEUE, QUEUE, stop_consumers, hold_s=3.0, window=20)),
            asyncio.create_task(w.consume(h, bs, TOPIC, TOPIC_GROUP, stop_consumers, durable=DURABLE)),
            asyncio.create_task(w.consume_large(h, bs, LARGE, stop_consumers)),
        ]
        await asyncio.sleep(1.0)  # the durable subscription exists before the first topic message
        producers = [
            asyncio.create_task(w.produce(h, "fq", bs, QUEUE, QUEUE, fixed=True, rate=80, stop=stop_load)),
            asyncio.create_task(
                w.produce(h, "ft", bs, TOPIC, TOPIC_GROUP, fixed=True, rate=80, stop=stop_load)
            ),
            asyncio.create_task(w.produce(h, "oq", bs, QUEUE, QUEUE, fixed=False, rate=80, stop=stop_load)),
            asyncio.create_task(
                w.produce(h, "ot", bs, TOPIC, TOPIC_GROUP, fixed=False, rate=80, stop=stop_load)
            ),
            asyncio.create_task(
                w.produce_large(h, bs, LARGE, random.Random(rng.random()), stop_load, 3 << 20, every_s=0.5)
            ),
        ]
        chaos = Chaos(cluster, random.Random(rng.random()), h, quiet_s=(4.0, 6.0))
        chaos.start()
        try:
            await asyncio.sleep(seconds)
            chaos.stop.set()
            await asyncio.to_thread(chaos.finished.wait, 300)
            await asyncio.sleep(2.0)  # load on a whole cluster after the last fault
            stop_load.set()
            h.stuck_tasks += await _finish(producers, 180)
            # The slow consumer works through its share at 3 s a batch: allow for a loaded machine.
            deadline = time.monotonic() + 300
            while not _drained(h) and time.monotonic() < deadline:  # noqa: ASYNC110 - polls a record
                await asyncio.sleep(0.5)
            await asyncio.sleep(2.0)  # late repeats of what was just delivered count too
            stop_consumers.set()
            h.stuck_tasks += await _finish(consumers, 60)
            await w.read_everything(h, bs)
        finally:
            stop_load.set()
            stop_consumers.set()
            chaos.stop.set()
            chaos.release.set()
            chaos.join(60)
        survivors = {n: p.poll() is None for n, p in cluster.procs.items()}
        events = cluster.state()["events"]  # the controller's last decisions, for a failed run

    verdict, examples = check(h, settle)
    print("faults: " + "; ".join(chaos.log))
    for line in examples + h.read_errors:
        print("  " + line)
    print(summary_line({**verdict, "seed": seed}))
    failed: dict[str, object] = {k: verdict[k] for k in MUST_BE_ZERO if verdict[k]}
    if chaos.error is not None:  # the cluster was not whole again within 90 s of a fault
        failed["not_recovered"] = repr(chaos.error)
    if not all(survivors.values()):
        failed["dead_processes"] = [n for n, alive in survivors.items() if not alive]
    if failed:
        for e in events[-40:]:
            print(f"  controller: {e['reason']}: {e['message']}")
    assert not failed, f"adversarial chaos verdicts failed: {failed} (seed={seed})"
    assert verdict["faults"] >= 1 and verdict["acked"] > 100, "the run did too little to judge"
    assert verdict["large_sent"] >= 1, "no large message was acknowledged"
