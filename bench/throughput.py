"""End-to-end throughput: producer -> CM -> MM -> CM -> consumer, 100-byte messages.

Starts 1 CM + 1 MM as real subprocesses (``LocalCluster``, fsync group commit on), then in this
process one producer (batching on: linger + batch size) and one consumer on the same topic. Each
value carries its send time (monotonic ns) so latency = send -> receive. Appends one JSON line to
``bench/results/throughput.jsonl`` and ends with ``msgs_per_s=… p50_ms=… p99_ms=…``.

``--awaited`` measures the application that waits for every acknowledgement: a producer process
whose ``--in-flight`` tasks (default 1,000) each ``await send()`` one message after the other, and
a consumer in another process. The rate is messages / (first send -> last message received).

    .venv/bin/python bench/throughput.py [--messages 1000000] [--size 100] [--fsync group]
    .venv/bin/python bench/throughput.py --awaited [--messages 200000] [--in-flight 1000]
    .venv/bin/python bench/throughput.py --tls [--rounds 2] [--awaited]

``--baseline-src DIR`` compares the brokers of this tree with those of another checkout (e.g.
``git worktree add /tmp/before <commit>``) in the same run: rounds alternate, the CM and MM of every
other round run from ``DIR/broker-image`` (the in-process client stays this tree's; with
``--awaited`` the producer and consumer processes run ``DIR``'s client too, and the line carries
their ``old_/new_producer_cpu_us_per_msg``), and the line ends with ``new_old_ratio=`` (msgs/s
here over the baseline, medians) and ``new_old_cpu_ratio`` (the baseline's CPU per message over
this tree's: above 1, cheaper now).

``--tls`` measures plain TCP and TLS (``LocalCluster(tls=True)``: client -> CM and CM -> MM on TLS)
in the same run, alternating ``--rounds`` times, and ends with ``tls_ratio=`` (TLS msgs/s over
plain, the medians of the rounds); ``tls_cpu_ratio`` compares the CPU per message of the CM, the MM
and the client (plain over TLS), which other work on a shared machine disturbs less.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from ssl import SSLContext

import _results  # bench/, the script's directory
import psutil

from hybridmq.broker.runtime import install_uvloop
from hybridmq.client import Consumer, Producer
from hybridmq.local.runner import LocalCluster

_TS = struct.Struct(">q")


async def run(
    bootstrap: str,
    messages: int,
    size: int,
    linger_ms: float,
    batch_bytes: int,
    window: int,
    pending_bytes: int,
    dest: str = "topic:bench",
    ssl: SSLContext | None = None,
) -> dict[str, float]:
    consumer = await Consumer.connect(bootstrap, dest, window=window, window_bytes=window << 8, ssl=ssl)
    producer = await Producer.connect(
        bootstrap, linger_ms=linger_ms, batch_bytes=batch_bytes, max_pending_bytes=pending_bytes, ssl=ssl
    )
    pad = b"x" * (size - _TS.size)
    latencies: list[int] = []
    done = asyncio.Event()
    received = 0

    async def consume() -> None:
        nonlocal received
        while received < messages:
            batch = await consumer.receive_batch(timeout=60)
            now = time.monotonic_ns()
            for m in batch:
                latencies.append(now - _TS.unpack_from(m.value)[0])  # type: ignore[union-attr]
            received += len(batch)
        done.set()

    task = asyncio.create_task(consume())
    start = time.monotonic()
    mono = time.monotonic_ns
    pack = _TS.pack
    try_send = producer.try_send
    sent = 0
    while sent < messages:
        if not try_send(dest, pack(mono()) + pad):
            await producer.wait_unblocked()
            continue
        sent += 1
        if sent % 512 == 0:
            await asyncio.sleep(0)
    await producer.flush()
    async with asyncio.timeout(120):
        await done.wait()
    elapsed = time.monotonic() - start
    await task
    await producer.close()
    await consumer.close()
    latencies.sort()
    return {
        "msgs_per_s": messages / elapsed,
        "p50_ms": latencies[len(latencies) // 2] / 1e6,
        "p99_ms": latencies[int(len(latencies) * 0.99)] / 1e6,
        "elapsed_s": elapsed,
    }


async def awaited_producer(bootstrap: str, messages: int, size: int, in_flight: int, dest: str) -> None:
    """``in_flight`` tasks, each awaiting the acknowledgement of its message before the next one."""
    producer = await Producer.connect(bootstrap)
    value = b"x" * size
    per_task, extra = divmod(messages, in_flight)

    async def worker(count: int) -> None:
        for _ in range(count):
            await producer.send(dest, value)

    print(json.dumps({"start": time.time()}), flush=True)
    await asyncio.gather(*(worker(per_task + (i < extra)) for i in range(in_flight)))
    print(json.dumps({"end": time.time(), "cpu": time.process_time()}), flush=True)
    await producer.close()


async def awaited_consumer(bootstrap: str, messages: int, window: int, dest: str) -> None:
    consumer = await Consumer.connect(bootstrap, dest, window=window, window_bytes=window << 8)
    print(json.dumps({"ready": time.time()}), flush=True)
    received = 0
    while received < messages:
        received += len(await consumer.receive_batch(timeout=120))
    print(json.dumps({"end": time.time(), "cpu": time.process_time()}), flush=True)
    await consumer.close()


def run_awaited(
    bootstrap: str, args: argparse.Namespace, ca_file: Path | None = None, client_src: Path | None = None
) -> dict[str, float]:
    """The producer and the consumer as separate processes (this file, ``--role``); over TLS with
    ``ca_file`` (``HYBRIDMQ_TLS_CA``); with the client library of ``client_src`` (a checkout's root)."""
    common = [sys.executable, __file__, "--bootstrap", bootstrap, "--messages", str(args.messages)]
    common += ["--size", str(args.size), "--dest", args.dest, "--window", str(args.window)]
    env = dict(os.environ)
    env.pop("HYBRIDMQ_TLS_CA", None)
    if client_src is not None:
        env["PYTHONPATH"] = str(client_src / "broker-image")
    if ca_file is not None:
        env["HYBRIDMQ_TLS_CA"] = str(ca_file)
    consumer = subprocess.Popen([*common, "--role", "consumer"], stdout=subprocess.PIPE, text=True, env=env)
    assert consumer.stdout is not None
    json.loads(consumer.stdout.readline())  # subscribed
    producer = subprocess.Popen(
        [*common, "--role", "producer", "--in-flight", str(args.in_flight)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    out, _ = producer.communicate(timeout=600)
    lines = [json.loads(line) for line in out.splitlines()]
    start, sent = lines[0]["start"], lines[1]["end"]
    consumed = json.loads(consumer.stdout.readline())
    end = consumed["end"]
    consumer.wait(60)
    if producer.returncode or consumer.returncode:
        raise SystemExit(f"producer exited {producer.returncode}, consumer {consumer.returncode}")
    return {
        "msgs_per_s": args.messages / (end - start),
        "acked_msgs_per_s": args.messages / (sent - start),
        "elapsed_s": end - start,
        # CPU per message, less sensitive than the rates to other work on the machine
        "producer_cpu_us_per_msg": lines[1]["cpu"] / args.messages * 1e6,
        "consumer_cpu_us_per_msg": consumed["cpu"] / args.messages * 1e6,
    }


@contextlib.contextmanager
def brokers_from(src: Path | None) -> Iterator[None]:
    """Broker processes started meanwhile import ``hybridmq`` from ``src`` (None: this tree)."""
    if src is None:
        yield
        return
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(src / "broker-image")
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before


def measure(args: argparse.Namespace, tls: bool, broker_src: Path | None = None) -> dict[str, float]:
    """One cluster (1 CM + 1 MM), plain or TLS, and one measurement on it; ``broker_src``: the
    brokers run from another checkout."""
    with tempfile.TemporaryDirectory(prefix="hmq-bench-") as tmp:
        cluster = LocalCluster(
            Path(tmp),
            mms=1,
            fixed_per_mm=1,
            on_demand_per_mm=1,
            fsync=args.fsync,
            mm_args=["--max-backlog", str(args.max_backlog)],
            tls=tls,
        )
        with brokers_from(broker_src):
            cluster.start()
        with contextlib.ExitStack() as running:
            running.callback(cluster.stop)
            brokers = [psutil.Process(p.pid) for p in cluster.procs.values()]
            cpu_before = sum(sum(b.cpu_times()[:2]) for b in brokers) + time.process_time()
            prof = None
            if args.profile:
                import cProfile

                prof = cProfile.Profile()
                prof.enable()
            result = (
                run_awaited(cluster.bootstrap, args, cluster.ca_file, broker_src)
                if args.awaited
                else asyncio.run(
                    run(
                        cluster.bootstrap,
                        args.messages,
                        args.size,
                        args.linger_ms,
                        args.batch_bytes,
                        args.window,
                        args.pending_bytes,
                        args.dest,
                        cluster.client_ssl(),
                    )
                )
            )
            # CPU of the CM, the MM and this process (the in-process client) per message: what TLS
            # costs, less sensitive than the rates to other work on a shared machine.
            cpu = sum(sum(b.cpu_times()[:2]) for b in brokers) + time.process_time() - cpu_before
            result["cpu_us_per_msg"] = cpu / args.messages * 1e6
            if prof is not None:
                prof.disable()
                prof.dump_stats(os.path.join(args.profile, "client.prof"))
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--linger-ms", type=float, default=2.0)
    ap.add_argument("--batch-bytes", type=int, default=64 * 1024)
    ap.add_argument("--fsync", default="group", choices=["group", "always", "never"])
    ap.add_argument("--window", type=int, default=4_000, help="consumer window (records)")
    ap.add_argument("--pending-bytes", type=int, default=500_000, help="producer max pending bytes")
    ap.add_argument("--max-backlog", type=int, default=5_000, help="MM backlog before producers block")
    ap.add_argument("--dest", default="topic:bench", help="queue:… measures committed acks and deliveries")
    ap.add_argument("--profile", help="directory for cProfile output of CM, MM and this client process")
    ap.add_argument("--awaited", action="store_true", help="each message sent with `await send()`")
    ap.add_argument("--in-flight", type=int, default=1_000, help="--awaited: concurrent awaited sends")
    ap.add_argument("--tls", action="store_true", help="plain TCP and TLS in the same run: tls_ratio=")
    ap.add_argument("--rounds", type=int, default=2, help="--tls, --baseline-src: measurements of each")
    ap.add_argument(
        "--baseline-src",
        type=Path,
        help="a checkout whose brokers to compare with, alternating: new_old_ratio=",
    )
    ap.add_argument("--role", choices=["producer", "consumer"], help=argparse.SUPPRESS)
    ap.add_argument("--bootstrap", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.role:
        install_uvloop()
        if args.role == "producer":
            coro = awaited_producer(args.bootstrap, args.messages, args.size, args.in_flight, args.dest)
        else:
            coro = awaited_consumer(args.bootstrap, args.messages, args.window, args.dest)
        asyncio.run(coro)
        return
    if args.profile:
        os.makedirs(args.profile, exist_ok=True)
        os.environ["HYBRIDMQ_PROFILE"] = os.path.abspath(args.profile)
    install_uvloop()
    load_before = _results.load_average()  # other work on the box skews the numbers: record it
    if args.tls:
        rounds: dict[bool, list[dict[str, float]]] = {False: [], True: []}
        for _ in range(args.rounds):
            for tls in (False, True):
                rounds[tls].append(measure(args, tls))
        result = {
            "plain_msgs_per_s": statistics.median(r["msgs_per_s"] for r in rounds[False]),
            "tls_msgs_per_s": statistics.median(r["msgs_per_s"] for r in rounds[True]),
        }
        result["tls_ratio"] = result["tls_msgs_per_s"] / result["plain_msgs_per_s"]
        # The same comparison by CPU per message (plain over TLS: 1.0 means TLS costs nothing).
        result["plain_cpu_us_per_msg"] = statistics.median(r["cpu_us_per_msg"] for r in rounds[False])
        result["tls_cpu_us_per_msg"] = statistics.median(r["cpu_us_per_msg"] for r in rounds[True])
        result["tls_cpu_ratio"] = result["plain_cpu_us_per_msg"] / result["tls_cpu_us_per_msg"]
        runs = {
            "plain_runs": [r["msgs_per_s"] for r in rounds[False]],
            "tls_runs": [r["msgs_per_s"] for r in rounds[True]],
        }
    elif args.baseline_src:
        src = args.baseline_src.resolve()
        if not (src / "broker-image" / "hybridmq").is_dir():
            ap.error(f"--baseline-src {src}: no broker-image/hybridmq there (give a checkout's root)")
        both: dict[bool, list[dict[str, float]]] = {False: [], True: []}  # True: this tree
        for _ in range(args.rounds):
            for new in (False, True):
                both[new].append(measure(args, False, None if new else src))
        result = {
            "old_msgs_per_s": statistics.median(r["msgs_per_s"] for r in both[False]),
            "new_msgs_per_s": statistics.median(r["msgs_per_s"] for r in both[True]),
            "old_cpu_us_per_msg": statistics.median(r["cpu_us_per_msg"] for r in both[False]),
            "new_cpu_us_per_msg": statistics.median(r["cpu_us_per_msg"] for r in both[True]),
        }
        if args.awaited:
            for label, new in (("old", False), ("new", True)):
                for role in ("producer", "consumer"):
                    key = f"{role}_cpu_us_per_msg"
                    result[f"{label}_{key}"] = statistics.median(r[key] for r in both[new])
        result["new_old_cpu_ratio"] = result["old_cpu_us_per_msg"] / result["new_cpu_us_per_msg"]
        result["new_old_ratio"] = result["new_msgs_per_s"] / result["old_msgs_per_s"]
        runs = {
            "old_runs": [r["msgs_per_s"] for r in both[False]],
            "new_runs": [r["msgs_per_s"] for r in both[True]],
        }
    else:
        result = measure(args, False)
        runs = {}
    # the ratio last: the line ends with it.
    order = sorted(result, key=lambda k: k in ("tls_ratio", "new_old_ratio"))
    _results.append(
        "throughput",
        {
            "bench": ("throughput-awaited" if args.awaited else "throughput")
            + ("-tls" if args.tls else "")
            + ("-vs-baseline" if args.baseline_src else ""),
            **({"baseline_src": str(args.baseline_src)} if args.baseline_src else {}),
            "messages": args.messages,
            "size": args.size,
            "linger_ms": args.linger_ms,
            "batch_bytes": args.batch_bytes,
            "fsync": args.fsync,
            "window": args.window,
            "pending_bytes": args.pending_bytes,
            **({"in_flight": args.in_flight} if args.awaited else {}),
            "max_backlog": args.max_backlog,
            "dest": args.dest,
            "profiled": bool(args.profile),
            **{k: round(v, 3) for k, v in result.items()},
            **{k: [round(v) for v in vs] for k, vs in runs.items()},
        },
        {k: f"{result[k]:.2f}" for k in order},
        load_before,
    )


if __name__ == "__main__":
    main()
