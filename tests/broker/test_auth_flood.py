"""A flood of wrong passwords does not slow down an authenticated client; a client that has not
authenticated gets no large buffer.

Real CM and MM processes with credentials; ``password_flood.py`` runs as its own process and keeps
32 connections at a time sending HELLOs with wrong passwords for a real user, while alice, connected
before, produces one message at a time and times each acknowledgement. What a user checks:

* every flood HELLO was refused with AUTH_FAILED or the retriable AUTH_BUSY (none accepted, none
  left unanswered);
* alice's p99 during the flood stays within a bound of her quiet p99 measured in the same run (the
  worse of the windows before and after, as the machine's load drifts);
* a client connecting after the flood gets in at once.

``--auth-concurrency`` is checked by what it allows: with two slow password checks under way, a
third runs beside them only when the CM allows three at a time.

The CM's CPU during the flood is printed (a wrong password still costs one PBKDF2 verification; the
gate bounds how many run at a time and how fast one connection may guess).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import struct
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import msgpack
import psutil
import pytest

from hybridmq.api.frames import ErrorCode
from hybridmq.client import ClientError, Producer
from hybridmq.local.runner import LocalCluster

FLOOD = Path(__file__).with_name("password_flood.py")
WINDOW_S = 4.0
ALICE = {"user": "alice", "password": "alice-secret"}
HELLO_OK = 2


def p99(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=100, method="inclusive")[98]


async def sends_for(
    producer: Producer, seconds: float, until: asyncio.Future[object] | None = None
) -> list[float]:
    """Acknowledgement latencies of one-at-a-time sends for ``seconds`` (or until ``until`` is done)."""
    latencies: list[float] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end if until is None else not until.done():
        start = time.perf_counter()
        await producer.send("queue:alice.work", b"x" * 100)
        latencies.append(time.perf_counter() - start)
    return latencies


@pytest.mark.solo  # its latency bound holds against a quiet baseline: not beside other tests
async def test_wrong_password_flood_is_refused_without_slowing_others(secure_cluster: LocalCluster) -> None:
    cm = psutil.Process(secure_cluster.pid("cm-0"))
    producer = await Producer.connect(secure_cluster.bootstrap, **ALICE)
    await sends_for(producer, 1.0)  # warm-up
    before = await sends_for(producer, WINDOW_S)
    cpu_start = sum(cm.cpu_times()[:2])
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(FLOOD), secure_cluster.bootstrap, "--user", "alice", "--seconds", str(WINDOW_S),
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    finished = asyncio.ensure_future(proc.communicate())
    during = await sends_for(producer, 0, until=finished)
    out, _ = await finished
    flood_s = time.monotonic() - started
    cm_cores = (sum(cm.cpu_times()[:2]) - cpu_start) / flood_s
    after = await sends_for(producer, WINDOW_S)
    # the one connected before the flood still works, and a new legitimate one gets in
    async with await Producer.connect(secure_cluster.bootstrap, **ALICE) as again:
        await again.send("queue:alice.work", b"after the flood")
    await producer.close()

    answers: dict[str, int] = json.loads(out.decode().strip().splitlines()[-1])
    quiet, flood = max(p99(before), p99(after)), p99(during)
    print(
        f"\nflood answers in {flood_s:.1f} s: {answers}; CM CPU {cm_cores:.2f} cores"
        f"\nquiet p99 {p99(before) * 1000:.1f} / {p99(after) * 1000:.1f} ms (before / after, n={len(before)}"
        f"+{len(after)}), flood p99 {flood * 1000:.1f} ms (n={len(during)}), ratio {flood / quiet:.2f}"
    )
    assert sum(answers.values()) >= 50, answers
    assert set(answers) <= {"error_10", "error_15"}, answers  # AUTH_FAILED, AUTH_BUSY
    assert flood <= 2.0 * quiet + 0.005, (flood, quiet)


async def test_a_huge_hello_is_refused_before_its_body_is_read(secure_cluster: LocalCluster) -> None:
    """Before authentication a client gets no buffer of the full frame size (16 MiB by default)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", secure_cluster.cm_port)
    try:
        body = msgpack.packb({"t": 1, "v": 1, "id": "big", "user": "alice", "password": "p" * (1 << 20)})
        writer.write(struct.pack(">I", len(body)) + body[:1000])  # the rest never comes
        await writer.drain()
        started = time.monotonic()
        (size,) = struct.unpack(">I", await asyncio.wait_for(reader.readexactly(4), 30))
        reply = msgpack.unpackb(await reader.readexactly(size))
        assert time.monotonic() - started < 5  # at once, not after the handshake timeout
    finally:
        writer.close()
    assert reply["t"] == 3 and reply["code"] == ErrorCode.FRAME_TOO_LARGE and reply["fatal"] is True, reply
    assert f"frame of {len(body)} bytes exceeds" in reply["msg"], reply


@pytest.fixture(scope="module")
def tight_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """1 CM that lets one HELLO wait for a password check and answers failures at once."""
    d = tmp_path_factory.mktemp("tight")
    (d / "users").write_text("alice:alice-secret\n")
    args = ["--auth-concurrency", "1", "--auth-max-waiting", "1", "--auth-failure-delay", "0"]
    with LocalCluster(d / "run", mms=1, credentials=d / "users", cm_args=args) as c:
        yield c


async def test_hellos_beyond_the_queue_get_a_retriable_busy_error(tight_cluster: LocalCluster) -> None:
    async def attempt(i: int) -> object:
        try:
            await Producer.connect(tight_cluster.bootstrap, user="alice", password=f"guess-{i}")
        except ClientError as exc:
            return exc
        return "accepted"

    got = await asyncio.gather(*(attempt(i) for i in range(20)))
    codes = [e.code if isinstance(e, ClientError) else e for e in got]
    assert set(codes) == {ErrorCode.AUTH_FAILED, ErrorCode.AUTH_BUSY}, codes
    busy = next(e for e in got if isinstance(e, ClientError) and e.code == ErrorCode.AUTH_BUSY)
    assert "too many authentications in progress, retry later" in str(busy)
    async with await Producer.connect(tight_cluster.bootstrap, **ALICE) as p:  # once it is quiet again
        await p.send("queue:alice.work", b"in")


@pytest.fixture(scope="module")
def tight_two_cms(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """2 CMs that each let one HELLO wait for a password check; user ``slow`` has a stored hash of
    so many PBKDF2 iterations that checking any password for it takes seconds."""
    d = tmp_path_factory.mktemp("tight2")
    (d / "users").write_text("alice:alice-secret\nbob:bob-secret\nslow:pbkdf2$5000000$00$00\n")
    args = ["--auth-concurrency", "1", "--auth-max-waiting", "1", "--auth-failure-delay", "0"]
    with LocalCluster(d / "run", mms=1, cms=2, credentials=d / "users", cm_args=args) as c:
        yield c


async def _hello(address: str, user: str, password: str) -> tuple[asyncio.StreamWriter, asyncio.StreamReader]:
    host, _, port = address.rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    hello = msgpack.packb({"t": 1, "v": 1, "id": user, "user": user, "password": password, "role": "client"})
    writer.write(struct.pack(">I", len(hello)) + hello)
    await writer.drain()
    return writer, reader


SAME_TURN_S = 0.1  # answers read within this long of each other came in the same turn of the loop


async def _answer(reader: asyncio.StreamReader, within: float = 10) -> dict[str, object]:
    async with asyncio.timeout(within):
        (size,) = struct.unpack(">I", await reader.readexactly(4))
    return dict(msgpack.unpackb(await reader.readexactly(size)))


async def test_a_busy_cm_sends_the_client_to_the_next_one(tight_two_cms: LocalCluster) -> None:
    """AUTH_BUSY is retriable: while the first CM of its bootstrap list has its one password-check
    slot taken, a legitimate client connects through the next CM."""
    busy_cm, other_cm = tight_two_cms.bootstraps.split(",")
    slow, _ = await _hello(busy_cm, "slow", "anything")  # holds cm-0's only slot for seconds
    try:
        await asyncio.sleep(0.3)
        writer, reader = await _hello(busy_cm, "alice", "alice-secret")
        answer = await _answer(reader)
        writer.close()
        assert answer.get("code") == ErrorCode.AUTH_BUSY, answer  # cm-0 alone: busy
        async with await Producer.connect(f"{busy_cm},{other_cm}", **ALICE) as p:
            assert p.node == "cm-1"
            ack = await p.send("queue:alice.work", b"through the next CM")
        assert ack.offset >= 0
    finally:
        slow.close()


async def test_a_session_reconnecting_to_a_busy_cm_retries_it(tight_two_cms: LocalCluster) -> None:
    """The producer's CM dies while the only other CM is busy: the session keeps retrying (AUTH_BUSY
    is not a refusal for good) and carries on there once a password-check slot is free."""
    cm0, cm1 = tight_two_cms.bootstraps.split(",")
    producer = await Producer.connect(f"{cm1},{cm0}", user="bob", password="bob-secret")
    assert producer.node == "cm-1"
    slow, _ = await _hello(cm0, "slow", "anything")  # holds cm-0's only slot for seconds
    try:
        await asyncio.sleep(0.3)
        writer, reader = await _hello(cm0, "bob", "bob-secret")
        answer = await _answer(reader)
        writer.close()
        assert answer.get("code") == ErrorCode.AUTH_BUSY, answer  # cm-0: busy now
        tight_two_cms.kill_cm("cm-1")
        ack = await asyncio.wait_for(producer.send("queue:bob.work", b"after the failover"), 60)
    finally:
        slow.close()
    assert ack.offset >= 0 and (producer.node, producer.reconnects) == ("cm-0", 1)
    await producer.close()


@pytest.fixture(scope="module", params=[2, 3])
def two_slow_checks(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[int, LocalCluster]]:
    """1 CM with ``--auth-concurrency`` 2 or 3 (room for 8 waiting HELLOs); user ``slow``'s stored hash
    takes seconds of PBKDF2 to check."""
    d = tmp_path_factory.mktemp(f"concurrency{request.param}")
    (d / "users").write_text("alice:alice-secret\nslow:pbkdf2$2000000$00$00\n")
    args = ["--auth-concurrency", str(request.param), "--auth-max-waiting", "8", "--auth-failure-delay", "0"]
    with LocalCluster(d / "run", mms=1, credentials=d / "users", cm_args=args) as c:
        yield request.param, c


async def test_auth_concurrency_is_how_many_password_checks_run_at_once(
    two_slow_checks: tuple[int, LocalCluster],
) -> None:
    """Two slow checks are under way when alice connects. With ``--auth-concurrency 3`` hers runs
    beside them: she is in before either is answered. With 2 she waits for a free slot: one of them
    is answered first."""
    concurrency, cluster = two_slow_checks
    loop = asyncio.get_running_loop()
    answered: list[float] = []
    slow = [await _hello(cluster.bootstrap, "slow", f"guess-{i}") for i in range(2)]
    try:

        async def answer_of(reader: asyncio.StreamReader) -> dict[str, object]:
            answer = await _answer(reader, within=60)
            answered.append(loop.time())  # stamped as it is read, not in a later done-callback
            return answer

        answers = [asyncio.create_task(answer_of(reader)) for _, reader in slow]
        await asyncio.sleep(0.3)  # both HELLOs are in the CM's gate
        assert not answered, "the slow checks ended before alice came: the hash is too fast to tell"
        # A raw HELLO: the client library gives up a handshake after a few seconds, and with two
        # slots hers may wait for a whole slow check.
        writer, reader = await _hello(cluster.bootstrap, "alice", "alice-secret")
        try:
            welcome = await _answer(reader, within=60)
            alice_in = loop.time()
        finally:
            writer.close()
        assert welcome.get("t") == HELLO_OK, welcome
        if concurrency == 3:
            assert not answered, f"alice waited for a slow check to end ({answered[0] - alice_in:+.3f} s)"
        else:
            # The freed slot answers the slow check and then checks alice's (fast) password: both
            # answers can reach this process in one turn of its loop, read in either order. Had she
            # not waited she would be in seconds before (a slow check takes seconds).
            assert answered and answered[0] <= alice_in + SAME_TURN_S, (
                "alice got in while both slots were taken"
            )
        codes = [(await task).get("code") for task in answers]
        assert codes == [ErrorCode.AUTH_FAILED] * 2, codes
    finally:
        for writer, _ in slow:
            writer.close()
