"""A flood of malformed connections costs the users' partitions nothing.

Real CM and MM processes; the flood (random bytes, truncated frames, frames before HELLO) comes from
a separate process (``flood_client.py``) while a legitimate producer measures its acknowledgement
latency. What a user checks afterwards:

* no ``topic:_LOG`` record in any user partition (read back through the fetch API with internal
  destinations shown), the events being in the MMs' internal log partitions instead;
* a subscriber of ``topic:_LOG`` got a handful of events whose ``count`` adds up to the bad
  connections, and the processes' stderr logs are summarized the same way;
* the producer's p99 during the flood stays within a bound of its quiet p99 measured in the same run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hybridmq.api.frames import ErrorCode
from hybridmq.client import ClientError, Consumer, Fetcher, Message, Producer
from hybridmq.local.runner import LocalCluster

FLOOD_PER_ADDRESS = 2000
QUIET_SENDS = 300
FLOOD_CONCURRENCY = 5  # connections in flight at once: a flood that leaves the machine some CPU
INTERVAL_S = 3.0  # --log-summary-interval of the processes under test
BURST = 5  # records of one message shown per interval before they are summarized
FLOOD_CLIENT = Path(__file__).with_name("flood_client.py")
LOG = "topic:_LOG"


@pytest.fixture(scope="module", params=["static", "replicated"])
def flood_cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalCluster]:
    """1 CM + 2 MMs: static assignments, or replicated ones planned by the local controller."""
    with pytest.MonkeyPatch.context() as mp:  # the processes' --log-summary-interval, by environment
        mp.setenv("HYBRIDMQ_LOG_SUMMARY_INTERVAL", str(INTERVAL_S))
        d = tmp_path_factory.mktemp(f"flood-{request.param}")
        c = LocalCluster(d, mms=2) if request.param == "static" else LocalCluster(d, mms=2, replicas=2)
        with c:
            yield c


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (from /proc, independent of the broker)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def p99(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


async def timed_send(producer: Producer, i: int) -> float:
    start = time.perf_counter()
    await producer.send("topic:orders", b"%06d" % i + b"x" * 94)
    return time.perf_counter() - start


async def collect(consumer: Consumer, into: list[dict[str, Any]], arrived: asyncio.Event) -> None:
    while True:
        m = await consumer.receive()
        assert isinstance(m, Message) and m.destination == LOG
        into.append(json.loads(m.value))
        arrived.set()


async def read_all(fetcher: Fetcher, name: str, start: int, end: int) -> list[Any]:
    batches = []
    offset = start
    while offset < end:
        result = await fetcher.fetch(name, offset, max_offset=end, internal=True)
        batches.extend(result.batches)
        offset = result.next_offset
    return batches


def warnings_of(events: list[dict[str, Any]], node: str) -> list[dict[str, Any]]:
    return [e for e in events if e.get("node") == node and e.get("level") == "WARNING"]


@pytest.mark.solo  # its latency bound holds against a quiet baseline: not beside other tests
async def test_flood_of_bad_connections_stays_out_of_user_partitions(flood_cluster: LocalCluster) -> None:
    c = flood_cluster
    cm_addr, mm_addr = c.bootstrap, f"127.0.0.1:{c.mm_ports['mm-0']}"
    events: list[dict[str, Any]] = []
    logs = await Consumer.connect(c.bootstrap, LOG)
    arrived = asyncio.Event()
    collector = asyncio.create_task(collect(logs, events, arrived))
    fetcher = await Fetcher.connect(c.bootstrap)
    # mm-0's first fixed partition: where its events used to be appended
    target = min(p.name for p in await fetcher.partitions() if p.type == "fixed" and p.primary == "mm-0")
    producer = await Producer.connect(c.bootstrap, partition_type="fixed", partition=target)
    for i in range(50):  # warm-up
        await timed_send(producer, i)
    quiet = [await timed_send(producer, i) for i in range(QUIET_SENDS)]
    cpu_before = {n: cpu_seconds(c.procs[n].pid) for n in ("cm-0", "mm-0")}

    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(FLOOD_CLIENT),
        cm_addr,
        mm_addr,
        "--count",
        str(FLOOD_PER_ADDRESS),
        "--concurrency",
        str(FLOOD_CONCURRENCY),
        stdout=asyncio.subprocess.PIPE,
    )
    finished = asyncio.create_task(proc.communicate())
    during: list[float] = []
    while not finished.done():
        during.append(await timed_send(producer, len(during)))
    out, _ = await finished
    flood_s = time.monotonic() - started
    cpu = {n: cpu_seconds(c.procs[n].pid) - cpu_before[n] for n in cpu_before}
    made: dict[str, dict[str, int]] = json.loads(out.decode().strip().splitlines()[-1])
    for address in (cm_addr, mm_addr):
        assert made[address]["random"] + made[address]["truncated"] > FLOOD_PER_ADDRESS / 2
    expected = {
        node: made[address]["random"] + made[address]["truncated"]
        for node, address in (("cm-0", cm_addr), ("mm-0", mm_addr))
    }

    def counted(node: str) -> int:
        return sum(int(e.get("count", 1)) for e in warnings_of(events, node))

    deadline = time.monotonic() + 4 * INTERVAL_S + 30
    while any(counted(n) < expected[n] for n in expected) and time.monotonic() < deadline:
        arrived.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(arrived.wait(), max(0.0, deadline - time.monotonic()))
    # quiet again, once the flood's events are in: the machine's load drifts (other test runs),
    # so the baseline is the worse of the two quiet windows
    after = [await timed_send(producer, i) for i in range(QUIET_SENDS)]
    await producer.close()

    q99, f99 = max(p99(quiet), p99(after)), p99(during)
    print(
        f"\nflood {sum(sum(k.values()) for k in made.values())} connections in {flood_s:.1f} s: {made}"
        f"\nCPU seconds during the flood: {', '.join(f'{n} {t:.2f}' for n, t in cpu.items())}"
        f"\nquiet: n={len(quiet)}+{len(after)} p50={statistics.median(quiet + after) * 1000:.1f} ms"
        f" p99={p99(quiet) * 1000:.1f} / {p99(after) * 1000:.1f} ms (before / after)"
        f"\nflood: n={len(during)} p50={statistics.median(during) * 1000:.1f} ms p99={f99 * 1000:.1f} ms"
        f" ratio={f99 / q99:.2f}"
    )

    # 1. No _LOG record in any user partition: read every one of them back as a user would.
    try:
        with pytest.raises(ClientError) as refused:  # nor can a client write to the internal one
            await Producer.connect(c.bootstrap, partition_type="fixed", partition="_log.mm-0")
        assert refused.value.code == ErrorCode.UNKNOWN_PARTITION
        user_partitions = await fetcher.partitions()
        assert {p.type for p in user_partitions} <= {"fixed", "on-demand"}
        for meta in user_partitions:
            batches = await read_all(fetcher, meta.name, meta.start_offset, meta.end_offset)
            assert [b.base_offset for b in batches if b.destination == LOG] == [], meta.name

        # 2. Each bad connection that the processes log is counted once, in a handful of events.
        for node, want in expected.items():
            mine = warnings_of(events, node)
            kinds = {e["message"].split(": ", 1)[-1] if e.get("summary") else e["message"] for e in mine}
            summaries = [e for e in mine if e.get("summary")]
            print(f"{node}: {len(mine)} events, {len(summaries)} summaries, count {counted(node)} of {want}")
            assert counted(node) >= want, (node, mine[-3:])
            assert summaries and all(e["count"] > 1 for e in summaries)
            assert all("more like this in the last" in e["message"] for e in summaries)
            templates = {e["message"].split(": ", 1)[1] for e in summaries}
            per_template = BURST + flood_s / INTERVAL_S + 3
            assert len(mine) <= len(templates) * per_template + 3, (len(mine), kinds)

        # 3. The events are in the MMs' internal log partitions, read through the fetch API.
        internal = [p for p in await fetcher.partitions(internal=True) if p.type == "internal"]
        assert sorted(p.name for p in internal) == ["_log.mm-0", "_log.mm-1"]
        stored: list[dict[str, Any]] = []
        for meta in internal:
            for batch in await read_all(fetcher, meta.name, meta.start_offset, meta.end_offset):
                assert batch.control or batch.destination == LOG
                stored.extend(json.loads(r[0]) for r in batch.records)
        for node, want in expected.items():
            assert sum(int(e["count"]) for e in warnings_of(stored, node)) >= want
    finally:
        await fetcher.close()
        collector.cancel()
        await logs.close()

    if c.controller is not None:  # nothing of it reaches the controller's table
        assert not [p["name"] for p in c.state()["partitions"] if p["name"].startswith("_")]
        assert not [n for n in c.mm_stats("mm-0")["replicas"] if n.startswith("_log")]

    # 4. stderr is summarized the same way: a handful of lines, not one per bad connection.
    for node in ("cm-0", "mm-0"):
        lines = (c.dir / f"{node}.log").read_text(errors="replace").splitlines()
        warned = [ln for ln in lines if " WARNING " in ln]
        print(f"{node}: {len(warned)} WARNING lines on stderr")
        assert any("more like this in the last" in ln for ln in warned), node
        assert len(warned) < expected[node] / 10, (node, len(warned))

    # 5. The legitimate producer barely notices. The goal is 1.5x; the flood's own CPU (its client,
    # the accepts and refusals) competes with the producer on a shared 2-core machine, so the bound
    # is 3x (measured here: 0.7x-1.5x; with the events written into the producer's partition and a
    # stderr line per bad connection: 4.8x-5.3x).
    assert f99 <= max(3 * q99, q99 + 0.03), (q99, f99)
