"""Hostile clients beside a legitimate one (the hostile side is ``adv_hostile.py``, its own process).

Users: alice may produce and consume ``queue:alice.*``; bob only ``queue:bob.*``; ops may consume
everything (it reads the partitions at the end, as an operator would). Alice produces one message at
a time through the whole run and times each acknowledgement; the hostile process floods in every
other window. Verdicts: every broker process is alive; the p99 of alice's sends in a flood window is
within 1.5x of the quiet windows' on either side of it (the median of that ratio over the flood
windows); nothing hostile was acknowledged, delivered to
bob from alice's queues, or stored anywhere; no ``topic:_LOG`` batch sits in a partition that holds
alice's records; alice's consumers got every message she was acknowledged.
"""

from __future__ import annotations

import asyncio
import json
import math
import statistics
import sys
import time
from pathlib import Path

import adv_settings
import pytest

import results_record
from hybridmq.client import ClientError, Consumer, Fetcher, Producer
from hybridmq.local.runner import LocalCluster

# Quiet and flood windows alternate every WINDOW_S. The other work on a shared 2-core machine comes
# and goes in bursts that swing one window's p99 several times over, and drifts over tens of seconds;
# so each flood window is compared with the quiet windows just before and after it (the same load,
# drift cancels) and the verdict is the median of those ratios over many flood windows (a burst
# spoils one or two of them, not the median). Measured on the loaded machine, over stretches of 30
# flood windows: 0.92-1.31 this way, against 0.86-1.88 for one p99 over all samples of each kind and
# 0.99-2.75 for the median of 10 per-window p99s of each kind (2.5 s windows) compared apart.
# The first SETTLE_S of each window is left out: attacks in flight when a flood window ends finish then.
WINDOW_S = 1.0
SETTLE_S = 0.25
HOSTILE_DEFAULT_S = 60  # 30 flood windows
FLOOD_BOUND = 1.5  # flood window p99 / its quiet neighbours' p99, median over the flood windows
ALICE = {"user": "alice", "password": "alice-secret"}
BOB = {"user": "bob", "password": "bob-secret"}
OPS = {"user": "ops", "password": "ops-secret"}
WORK = "queue:alice.work"
INBOX = "queue:alice.inbox"  # read only at the end: what a forbidden subscription took is missing
MARK = b"HOSTILE|"
ACCEPTED = (
    "pre_hello_accepted",
    "forged_peer_produce_acked",
    "bad_password_hello_ok",
    "unauthorized_produce_acked",
)
MUST_BE_ZERO = (
    "legit_lost",
    "inbox_lost",
    "hostile_accepted",
    "acl_leaks",
    "hostile_records",
    "log_in_user_partitions",
)


def users(d: Path) -> tuple[Path, Path]:
    creds = d / "users"
    creds.mkdir()
    for who in (ALICE, BOB, OPS):
        (creds / who["user"]).write_text(who["password"] + "\n")
    acl = d / "acl.json"
    acl.write_text(
        json.dumps(
            {
                "alice": {"produce": ["queue:alice.*"], "consume": ["queue:alice.*"]},
                "bob": {"produce": ["queue:bob.*"], "consume": ["queue:bob.*"]},
                "ops": {"produce": [], "consume": ["*"]},
            }
        )
    )
    return creds, acl


def p99(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


def window_p99s(samples: list[tuple[float, float]], start: float, windows: int) -> list[float]:
    """p99 latency of the sends made in each window past its settle time (quiet windows even, flood
    windows odd); a window without a single acknowledged send counts as 60 s."""
    by_window: list[list[float]] = [[] for _ in range(windows)]
    for sent_at, latency in samples:
        i, into = divmod(sent_at - start, WINDOW_S)
        if 0 <= i < windows and into >= SETTLE_S:
            by_window[int(i)].append(latency)
    return [p99(w or [60.0]) for w in by_window]


def flood_ratios(p99s: list[float]) -> list[float]:
    """Each flood window's p99 over the mean of its two quiet neighbours' (windows alternate quiet,
    flood, quiet, ...)."""
    return [p99s[i] / ((p99s[i - 1] + p99s[i + 1]) / 2) for i in range(1, len(p99s) - 1, 2)]


async def drain(bs: str, dest: str, want: set[str], received: set[str], stop: asyncio.Event | None) -> None:
    """Consume ``dest`` as alice into ``received`` until ``stop`` (or, without one, until ``want``
    arrived or nothing came for 5 s)."""
    async with await Consumer.connect(bs, dest, **ALICE) as c:
        while not (stop.is_set() if stop else want <= received):
            try:
                msg = await c.receive(timeout=0.5 if stop else 5)
            except TimeoutError:
                if stop is None:
                    return
                continue
            received.add(bytes(msg.value).decode())  # type: ignore[union-attr]


async def read_partitions(bs: str, partitions: list[str]) -> tuple[int, int]:
    """(hostile records anywhere, ``topic:_LOG`` batches in partitions that hold alice's records),
    read by ops through the fetch API after alice wrote one record into every partition she may."""
    for name in partitions:
        try:
            fill = await Producer.connect(bs, partition=name, partition_type="fixed", **ALICE)
            await fill.send(WORK, b"alice-fill")
            await fill.close()
        except ClientError:
            pass  # not a partition users may write to
    hostile_records = log_in_user = 0
    async with await Fetcher.connect(bs, **OPS) as f:
        for meta in await f.partitions():
            offset, log_batches, alice_batches = meta.start_offset, 0, 0
            while offset < meta.end_offset:
                result = await f.fetch(meta.name, offset, max_offset=meta.end_offset, internal=True)
                if not result.batches:
                    break
                for b in result.batches:
                    hostile_records += sum(1 for r in b.records if isinstance(r[0], bytes) and MARK in r[0])
                    log_batches += b.destination == "topic:_LOG"
                    alice_batches += str(b.destination).startswith("queue:alice.")
                offset = result.next_offset
            if alice_batches:
                log_in_user += log_batches
    return hostile_records, log_in_user


@pytest.mark.timeout(int(adv_settings.seconds(HOSTILE_DEFAULT_S)) + 600)
async def test_hostile_clients_beside_a_legitimate_one(tmp_path: Path) -> None:
    seed = adv_settings.seed()
    # quiet, flood, quiet, ..., quiet: every flood window has a quiet one on either side
    windows = 1 + max(4, 2 * round(adv_settings.seconds(HOSTILE_DEFAULT_S) / (2 * WINDOW_S)))
    print(f"\nadversarial hostile: seed={seed} windows={windows}x{WINDOW_S}s")
    creds, acl = users(tmp_path)
    cluster = LocalCluster(
        tmp_path / "run",
        mms=2,
        replicas=2,
        fixed=2,
        on_demand_per_mm=1,
        credentials=creds,
        acl=acl,
        cm_args=adv_settings.cm_args(),
        # Failover is not what this run tests: the local controller judging the MMs' leases is a
        # thread of this process, beside alice's tight send loop, and on a machine at load 15-30 a
        # 1 s lease lapsed now and then (a failover, and alice's sends refused while it ran).
        lease_s=5.0,
    )
    with cluster:
        bs = cluster.bootstrap
        async with await Fetcher.connect(bs, **OPS) as f:
            partitions = [[m.name, m.epoch] for m in await f.partitions()]
        start = time.time() + 4.0
        config = {
            "seed": seed,
            "start": start,
            "window_s": WINDOW_S,
            "windows": windows,
            "cm_port": cluster.cm_port,
            "mm_ports": list(cluster.mm_ports.values()),
            "partitions": partitions,
            "bob": BOB,
            "attacks": adv_settings.attacks(),
        }
        (tmp_path / "hostile.json").write_text(json.dumps(config))
        report_path = tmp_path / "hostile-report.json"
        hostile = await asyncio.create_subprocess_exec(  # niced: the attacker's own CPU is not the broker's
            *("nice", "-n", "10", sys.executable, str(Path(__file__).with_name("adv_hostile.py"))),
            *("--config", str(tmp_path / "hostile.json"), "--out", str(report_path)),
        )
        received: set[str] = set()
        stop = asyncio.Event()
        consuming = asyncio.create_task(drain(bs, WORK, set(), received, stop))
        samples: list[tuple[float, float]] = []  # (wall clock at send, seconds to the ack)
        acked, inbox, errors = set[str](), set[str](), list[str]()
        try:
            p = await Producer.connect(bs, partition_type="fixed", key="alice", **ALICE)
            n = 0
            while time.time() < start + windows * WINDOW_S:
                body = f"alice-{n}"
                n += 1
                sent_at, t0 = time.time(), time.perf_counter()
                try:
                    await asyncio.wait_for(p.send(WORK, body.encode()), 30)
                    samples.append((sent_at, time.perf_counter() - t0))
                    acked.add(body)
                    if n % 10 == 0:
                        await asyncio.wait_for(p.send(INBOX, body.encode()), 30)
                        inbox.add(body)
                except (ClientError, ConnectionError, TimeoutError) as exc:
                    errors.append(f"{body}: {exc!r}")
            await p.close()
            await asyncio.wait_for(hostile.wait(), 60)
            deadline = time.monotonic() + 15
            while not acked <= received and time.monotonic() < deadline:  # noqa: ASYNC110 - polls a record
                await asyncio.sleep(0.2)
        finally:
            stop.set()
            if hostile.returncode is None:
                hostile.kill()
                await hostile.wait()
            await asyncio.wait_for(consuming, 30)
        survivors = {name: proc.poll() is None for name, proc in cluster.procs.items()}
        in_inbox: set[str] = set()
        await drain(bs, INBOX, inbox, in_inbox, None)
        hostile_records, log_in_user = await read_partitions(bs, [name for name, _ in partitions])

    report = json.loads(report_path.read_text())
    stats, leaks = report["stats"], report["leaks"]
    (tmp_path / "latencies.json").write_text(json.dumps({"start": start, "samples": samples}))
    p99s = window_p99s(samples, start, windows)
    ratio = statistics.median(flood_ratios(p99s))
    quiet_ms, flood_ms = statistics.median(p99s[0::2]) * 1000, statistics.median(p99s[1::2]) * 1000
    print("hostile stats: " + json.dumps(stats, sort_keys=True))
    ms = [[round(x * 1e3, 1) for x in p99s[k::2]] for k in (0, 1)]
    print(f"p99 ms per window: quiet={ms[0]} flood={ms[1]}")
    for leak in leaks[:10]:
        print("  leak: " + leak)
    verdict = {
        "survived": sum(survivors.values()),
        "processes": len(survivors),
        "quiet_p99_ms": round(quiet_ms, 1),
        "flood_p99_ms": round(flood_ms, 1),
        "ratio": round(ratio, 2),
        "legit_acked": len(acked),
        "legit_errors": len(errors),
        "legit_lost": len(acked - received),
        "inbox_lost": len(inbox - in_inbox),
        "hostile_accepted": sum(int(stats.get(k, 0)) for k in ACCEPTED),
        "acl_leaks": len(leaks),
        "hostile_records": hostile_records,
        "log_in_user_partitions": log_in_user,
        "seed": seed,
    }
    print(" ".join(f"{k}={v}" for k, v in verdict.items()))
    results_record.append("hostile", verdict)  # every run of the suite keeps its ratio
    assert all(survivors.values()), f"broker processes died: {survivors}"
    assert acked and not errors, f"the legitimate client failed: {errors[:5]}"
    failed = {k: verdict[k] for k in MUST_BE_ZERO if verdict[k]}
    if ratio > FLOOD_BOUND:
        failed[f"flood_p99_over_{FLOOD_BOUND}x_quiet"] = verdict["ratio"]
    assert not failed, f"adversarial hostile verdicts failed: {failed} (seed={seed})"
