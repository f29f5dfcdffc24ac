"""Affinity takeover through real processes: an affinity member dies under load, a survivor takes over its
queue with the marker protocol; per session key every message is processed once, in publish order."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Callable, Iterator

import pytest

from hybridmq.client import Producer
from hybridmq.client.affinity_group import AffinityMember, adopter
from hybridmq.client.message import Message
from hybridmq.local.runner import LocalCluster

TOPIC = "topic:sessions"
MEMBERS = ("m-a", "m-b", "m-c")
KEYS_PER_PRODUCER = 6
PRODUCERS = 2
PER_KEY = 150


@pytest.fixture
def cluster2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path_factory.mktemp("affinity"), mms=2, cms=2, fixed_per_mm=1, on_demand_per_mm=1)
    with c:
        yield c


async def produce(p: Producer, keys: list[str]) -> None:
    futs = []
    for seq in range(PER_KEY):
        for k in keys:
            futs.append(asyncio.ensure_future(p.send(TOPIC, f"{k}:{seq}".encode(), key=k)))
        await asyncio.sleep(0.02)
    await asyncio.gather(*futs)


# The membership lease is 3 s, not 1 s: on the 2 cores shared with three other test workers (load
# average 15) heartbeats through the brokers came more than 1 s late about one run in ten, a live
# member was declared dead and its keys processed twice. That is the lease doing what it promises
# (a member that misses it is dead for good); this test is about the takeover, not about the lease.
# The stall once seen here (the dead member's keys all processed by the dead member) was the crashed
# member still running: its cancel swallowed by wait_for, it went on processing and acknowledging;
# tests/unit/test_affinity_member_stop.py holds that. Bounded: a stall fails in minutes, not retried.
@pytest.mark.timeout(150)
async def test_affinity_takeover_under_load(cluster2: LocalCluster) -> None:
    record: list[tuple[str, str, int]] = []  # (member, key, seq) in processing order

    def handler_for(member: str) -> Callable[[Message], None]:
        def handle(msg: Message) -> None:
            key, _, seq = msg.value.decode().partition(":")
            record.append((member, key, int(seq)))

        return handle

    members = {
        m: await AffinityMember(
            cluster2.bootstraps,
            TOPIC,
            "grp",
            m,
            MEMBERS,
            handler_for(m),
            lease_s=3.0,
            heartbeat_s=0.2,
            distribution="round-robin",
        ).start()
        for m in MEMBERS
    }
    keys = [[f"s{i}-{j}" for j in range(KEYS_PER_PRODUCER)] for i in range(PRODUCERS)]
    producers = [
        await Producer.connect(cluster2.bootstraps, partition_type="fixed", key=f"prod-{i}")
        for i in range(PRODUCERS)
    ]
    all_keys = [k for ks in keys for k in ks]
    dead = "m-b"
    heir = adopter(dead, [m for m in MEMBERS if m != dead])
    assert any(members[dead].ownership.owner(k) == dead for k in all_keys)
    writers = [asyncio.ensure_future(produce(p, ks)) for p, ks in zip(producers, keys, strict=True)]
    await asyncio.sleep(1.0)
    await members[dead].crash()
    killed_at = time.monotonic()
    await asyncio.gather(*writers)
    total = len(all_keys) * PER_KEY
    for _ in range(600):  # at most 60 s
        if len(record) >= total:
            break
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.5)  # anything processed twice would show up now
    info = members[heir].takeovers
    print(f"takeover by {heir} {time.monotonic() - killed_at:.2f}s after the kill window: {info}")
    for m in MEMBERS:
        if m != dead:
            await members[m].stop()
    for p in producers:
        await p.close()

    for m in MEMBERS:
        if m != dead:
            assert members[m].leases.dead == [dead], f"{m} declared {members[m].leases.dead} dead"
    assert len(info) == 1 and info[0]["dead"] == dead
    by_key: dict[str, list[int]] = defaultdict(list)
    who: dict[str, list[str]] = defaultdict(list)
    for member, key, seq in record:
        by_key[key].append(seq)
        who[key].append(member)
    for k in all_keys:
        assert by_key[k] == list(range(PER_KEY)), f"{k}: not exactly once in order"
    adopted = [k for k in all_keys if members[heir].ownership.home(k) == dead]
    assert adopted, "the dead member owned no key"
    for k in adopted:  # processed by the dead member, then by the heir only
        owners = who[k]
        assert set(owners) <= {dead, heir} and heir in owners
        assert owners == sorted(owners, key=lambda m: m == heir)
