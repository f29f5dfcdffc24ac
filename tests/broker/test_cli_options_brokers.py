"""``hybridmq mm`` and ``hybridmq cm`` options through the installed command, each checked by its
effect from outside (files on disk, what clients get, raw frames, the processes' logs and ``/admin``).

One MM and one CM for the module, started here as a user or a pod would (no ``LocalCluster``), on a
static assignment file with three fixed partitions (``pa``, ``pb``, ``pc``) and one on-demand one (``od``):

* the MM is configured through its environment: ``HYBRIDMQ_NAME``, ``HYBRIDMQ_BIND``,
  ``HYBRIDMQ_HTTP_BIND``, ``HYBRIDMQ_ASSIGNMENTS``, ``HYBRIDMQ_DATA_DIR``, ``HYBRIDMQ_FSYNC``,
  ``HYBRIDMQ_CLUSTER_SECRET_FILE``, and by the flags ``--segment-bytes 4096``, ``--max-backlog 30``,
  ``--max-frame 262144``, ``--retention-interval 0.3``, ``--log-level INFO``;
* the CM by its flags ``--name``, ``--bind``, ``--http-bind``, ``--assignments``,
  ``--cluster-secret-file``, ``--max-frame 65536``, ``--local-bind``, ``--auth-failure-delay 1.5``,
  ``--log-level WARNING``, and ``HYBRIDMQ_CREDENTIALS`` / ``HYBRIDMQ_ACL`` from its environment.

The backlog and retention tests (and the two below) get a pair of their own (``fresh``, about 2 s),
and so does each ``--fsync`` mode (``HYBRIDMQ_FSYNC=always`` alone, ``--fsync never``, ``--fsync
group``), checked by the fsync rounds the MM's ``/admin`` counts for a partition.
The client side is ``hybridmq produce|consume`` too. A producer lands on a fixed partition by
crc32(key) over the fixed partitions in name order; the keys below are picked by that rule.

Two defects found on the way have tests of their own here: a queue without consumers counted the
records of other destinations as its backlog (``--max-backlog`` then held their producers), and a
produce over the CM's ``--max-frame`` was resent for ever instead of failing in one line.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import socket
import struct
import subprocess
import time
import urllib.request
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack
import pytest
from local_cli import HYBRIDMQ

from hybridmq.api.assignment import BrokerEntry, BrokerRole, PartitionAssignment, PartitionType
from hybridmq.api.frames import ErrorCode
from hybridmq.client import Fetcher, Producer
from reading import read_batches

FIXED = ["pa", "pb", "pc"]
ALICE = ("--user", "alice", "--password", "alice-secret")
HELLO, HELLO_OK, ERROR = 1, 2, 3


def key_for(partition: str) -> str:
    """A producer key that the CM maps to the fixed ``partition``."""
    return next(
        k for k in (f"k{i}" for i in range(100)) if FIXED[zlib.crc32(k.encode()) % len(FIXED)] == partition
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[bytes], log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"exited {proc.returncode}: {log.read_text(errors='replace')[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"nothing on {port}: {log.read_text(errors='replace')[-2000:]}")


@dataclass
class Brokers:
    dir: Path
    secret: str
    mm_port: int
    mm_http: int
    cm_port: int
    cm_http: int
    local_port: int
    procs: dict[str, subprocess.Popen[bytes]]

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.cm_port}"

    def log(self, name: str) -> str:
        return (self.dir / f"{name}.log").read_text(errors="replace")

    def admin(self, port: int) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/admin", timeout=5) as r:
            return dict(json.loads(r.read()))

    def stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGINT)  # stop at once
        for p in self.procs.values():
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)

    def cli(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HYBRIDMQ_")}
        argv = [HYBRIDMQ, *args, "--bootstrap", self.bootstrap, *ALICE]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)


def _spawn(d: Path, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HYBRIDMQ_")}
    with open(d / f"{name}.log", "wb") as log:
        return subprocess.Popen(
            [HYBRIDMQ, *argv],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**clean, "PYTHONUNBUFFERED": "1", **env},
        )


def start_brokers(d: Path, mm_extra: tuple[str, ...] = ()) -> Brokers:
    """The MM and the CM of this module (see the module's docstring), once the CM is linked to the
    MM; ``mm_extra``: more MM flags."""
    secret = secrets.token_hex(24)
    (d / "secret").write_text(secret)
    (d / "secret").chmod(0o600)
    (d / "users.txt").write_text("alice:alice-secret\nbob:bob-secret\n")
    (d / "acl.json").write_text(json.dumps({"alice": {"produce": ["*"], "consume": ["*"]}, "bob": {}}))
    mm_port, mm_http, cm_port, cm_http, local_port = (free_port() for _ in range(5))
    one = ("mm-0",)
    table = {
        "brokers": [
            BrokerEntry(
                name="cm-0",
                role=BrokerRole.CM,
                address=f"127.0.0.1:{cm_port}",
                http_address=f"127.0.0.1:{cm_http}",
            ).model_dump(mode="json"),
            BrokerEntry(
                name="mm-0",
                role=BrokerRole.MM,
                address=f"127.0.0.1:{mm_port}",
                http_address=f"127.0.0.1:{mm_http}",
            ).model_dump(mode="json"),
        ],
        "partitions": [
            PartitionAssignment(
                name=n, type=t, primary="mm-0", replicas=one, in_sync=one, min_in_sync=1
            ).model_dump(mode="json")
            for n, t in [*((f, PartitionType.FIXED) for f in FIXED), ("od", PartitionType.ON_DEMAND)]
        ],
    }
    (d / "assignments.json").write_text(json.dumps(table))
    mm_env = {
        "HYBRIDMQ_NAME": "mm-0",
        "HYBRIDMQ_BIND": f"127.0.0.1:{mm_port}",
        "HYBRIDMQ_HTTP_BIND": f"127.0.0.1:{mm_http}",
        "HYBRIDMQ_ASSIGNMENTS": str(d / "assignments.json"),
        "HYBRIDMQ_DATA_DIR": str(d / "mm-data"),
        "HYBRIDMQ_FSYNC": "always",
        "HYBRIDMQ_CLUSTER_SECRET_FILE": str(d / "secret"),
    }
    mm_flags = ["--segment-bytes", "4096", "--max-backlog", "30", "--max-frame", "262144"]
    mm_flags += ["--retention-interval", "0.3", "--log-level", "INFO", *mm_extra]
    b = Brokers(d, secret, mm_port, mm_http, cm_port, cm_http, local_port, {})
    b.procs["mm-0"] = _spawn(d, "mm-0", ["mm", *mm_flags], mm_env)
    try:
        wait_port(mm_port, b.procs["mm-0"], d / "mm-0.log")
        cm_flags = ["--name", "cm-0", "--bind", f"127.0.0.1:{cm_port}", "--http-bind", f"127.0.0.1:{cm_http}"]
        cm_flags += ["--assignments", str(d / "assignments.json"), "--cluster-secret-file", str(d / "secret")]
        cm_flags += ["--max-frame", "65536", "--local-bind", f"127.0.0.1:{local_port}"]
        cm_flags += ["--auth-failure-delay", "1.5", "--log-level", "WARNING"]
        cm_env = {"HYBRIDMQ_CREDENTIALS": str(d / "users.txt"), "HYBRIDMQ_ACL": str(d / "acl.json")}
        b.procs["cm-0"] = _spawn(d, "cm-0", ["cm", *cm_flags], cm_env)
        wait_port(cm_port, b.procs["cm-0"], d / "cm-0.log")
        deadline = time.monotonic() + 60
        while not _linked(b, cm_http):
            assert time.monotonic() < deadline, b.log("cm-0")[-2000:]
            time.sleep(0.05)
    except BaseException:
        b.stop()
        raise
    return b


def _linked(b: Brokers, cm_http: int) -> bool:
    """The CM is linked to the MM (its HTTP listener may open after its client port)."""
    try:
        return bool(b.admin(cm_http).get("mm_links", {}).get("mm-0"))
    except OSError:
        return False


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Brokers]:
    b = start_brokers(tmp_path_factory.mktemp("cli-brokers"))
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def fresh(tmp_path: Path) -> Iterator[Brokers]:
    """A pair of its own, for a test of the backlog or retention: a queue that another test consumed
    keeps a delivery state on every partition whose cursor does not move without a consumer, and
    that state holds retention and counts as backlog (see the last test)."""
    b = start_brokers(tmp_path)
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(params=["always", "never", "group"])
def fsync_mode(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Brokers]]:
    """A pair whose MM runs with ``HYBRIDMQ_FSYNC=always`` alone, or with ``--fsync never|group``
    (the flag wins over the environment); ``--max-backlog`` raised so that no produce waits for a
    consumer."""
    flags = ("--max-backlog", "100000")
    if request.param != "always":
        flags += ("--fsync", request.param)
    b = start_brokers(tmp_path, flags)
    try:
        yield request.param, b
    finally:
        b.stop()


async def _burst_on_pc(brokers: Brokers) -> tuple[int, int]:
    """4 producers side by side send 40 messages each, one at a time, to partition ``pc``: (data
    batches its log gained, fsync rounds its log ran meanwhile, from the MM's ``/admin``)."""
    fsyncs_before = brokers.admin(brokers.mm_http)["partitions"]["pc"]["fsyncs"]
    async with await Fetcher.connect(brokers.bootstrap, user="alice", password="alice-secret") as f:
        (meta,) = await f.partitions(["pc"])
        producers = [
            await Producer.connect(
                brokers.bootstrap,
                user="alice",
                password="alice-secret",
                partition_type="fixed",
                key=key_for("pc"),
                linger_ms=0,
            )
            for _ in range(4)
        ]

        async def one_at_a_time(p: Producer) -> None:  # each send its own batch
            for _ in range(40):
                await p.send("queue:fsync", b"x" * 100)

        try:
            async with asyncio.timeout(60):
                await asyncio.gather(*(one_at_a_time(p) for p in producers))
        finally:
            for p in producers:
                await p.close()
        (after,) = await f.partitions(["pc"])
        batches = 0
        async for batch, _ in read_batches(f, after, meta.end_offset):
            batches += not batch.control and batch.destination == "queue:fsync"
    return batches, brokers.admin(brokers.mm_http)["partitions"]["pc"]["fsyncs"] - fsyncs_before


async def test_fsync_mode_is_what_the_log_does(fsync_mode: tuple[str, Brokers]) -> None:
    mode, brokers = fsync_mode
    batches, fsyncs = await _burst_on_pc(brokers)
    if mode == "always":
        assert batches == 160 and fsyncs >= batches, (batches, fsyncs)
    elif mode == "never":
        assert batches == 160 and fsyncs == 0, (batches, fsyncs)
    else:  # one fsync round covers every append made while the one before ran
        assert batches == 160 and 1 <= fsyncs < batches, (batches, fsyncs)


def test_mm_environment_names_binds_and_places_it(brokers: Brokers) -> None:
    stats = brokers.admin(brokers.mm_http)  # HYBRIDMQ_HTTP_BIND serves /admin
    assert stats["node"] == "mm-0" and stats["role"] == "mm", stats  # HYBRIDMQ_NAME
    assert sorted(stats["partitions"]) == ["od", *FIXED], stats  # HYBRIDMQ_ASSIGNMENTS
    sent = brokers.cli("produce", "queue:env", "-m", "x", "--partition-type", "fixed", "--key", key_for("pa"))
    assert sent.returncode == 0 and " to pa " in sent.stdout, (sent.stdout, sent.stderr)
    assert (brokers.dir / "mm-data" / "pa").is_dir(), sorted(
        p.name for p in (brokers.dir / "mm-data").iterdir()
    )
    assert "--fsync" not in str(brokers.procs["mm-0"].args)  # by HYBRIDMQ_FSYNC only
    got = brokers.cli("consume", "queue:env", "--count", "1", "--timeout", "5")
    assert json.loads(got.stdout)["value"] == "x", got.stderr


def _segments(partition: Path) -> list[Path]:
    return sorted(p for p in partition.iterdir() if p.suffix == ".log")


def test_segment_bytes_rolls_segments_and_retention_interval_deletes_consumed_ones(fresh: Brokers) -> None:
    brokers = fresh
    key = key_for("pb")
    lines = "".join(f"{i:04d}{'x' * 1000}\n" for i in range(20))
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYBRIDMQ_")}
    common = ["--bootstrap", brokers.bootstrap, *ALICE]
    sent = subprocess.run(
        [HYBRIDMQ, "produce", "queue:seg", "--partition-type", "fixed", "--key", key, *common],
        input=lines,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert sent.returncode == 0 and "sent 20" in sent.stderr, sent.stderr
    partition = brokers.dir / "mm-data" / "pb"
    before = _segments(partition)
    assert len(before) >= 4, before  # 20 KB of records in 4 KiB segments (default 64 MiB: one)
    got = brokers.cli("consume", "queue:seg", "--count", "20", "--timeout", "10")
    assert got.returncode == 0 and len(got.stdout.splitlines()) == 20, got.stderr
    deadline = time.monotonic() + 4  # every 0.3 s (the default, 5 s, would not make it)
    while len(_segments(partition)) >= len(before) - 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(_segments(partition)) < len(before) - 2, (before, _segments(partition))


def test_max_backlog_holds_produces_past_the_limit_until_consumed(fresh: Brokers) -> None:
    brokers = fresh
    key = key_for("pa")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYBRIDMQ_")}
    common = ["--bootstrap", brokers.bootstrap, *ALICE]
    producer = subprocess.Popen(
        [
            HYBRIDMQ,
            "produce",
            "queue:gate",
            "-m",
            "g",
            "-n",
            "50",
            "--partition-type",
            "fixed",
            "--key",
            key,
            *common,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            state = brokers.admin(brokers.mm_http)["partitions"]["pa"]
            if state["blocked"]:
                break
            time.sleep(0.1)
        assert state["blocked"] and 30 < state["backlog"] <= 40, state  # --max-backlog 30
        time.sleep(1.0)
        assert producer.poll() is None  # its sends wait for credit
        assert brokers.admin(brokers.mm_http)["partitions"]["pa"]["backlog"] <= 40  # held
        got = brokers.cli("consume", "queue:gate", "--count", "50", "--timeout", "10")
        assert len(got.stdout.splitlines()) == 50, got.stderr[-2000:]
        out, err = producer.communicate(timeout=30)
        assert producer.returncode == 0 and out.startswith("sent 50 to pa"), (out, err)
    finally:
        if producer.poll() is None:
            producer.kill()
            producer.wait()


def test_cm_max_frame_is_announced_and_enforced(brokers: Brokers) -> None:
    small = brokers.cli("produce", "queue:frame", "-m", "s" * 30_000)
    assert small.returncode == 0, small.stderr[-2000:]
    got = brokers.cli("consume", "queue:frame", "--count", "1", "--timeout", "5")
    assert [len(json.loads(line)["value"]) for line in got.stdout.splitlines()] == [30_000]
    with socket.create_connection(("127.0.0.1", brokers.cm_port), timeout=10) as s:
        hello = {
            "t": HELLO,
            "v": 1,
            "id": "probe",
            "user": "alice",
            "password": "alice-secret",
            "role": "client",
        }
        s.sendall(_frame(hello))
        ok = _read(s)
        assert ok["t"] == HELLO_OK and ok["max_frame"] == 65536, ok
        s.sendall(struct.pack(">I", 65537))  # one byte over --max-frame: refused from the prefix
        err = _read(s)
        assert (
            err["t"] == ERROR and err["code"] == ErrorCode.FRAME_TOO_LARGE and "exceeds 65536" in err["msg"]
        ), err


async def test_records_that_fit_the_cms_max_frame_alone_go_in_several_frames(brokers: Brokers) -> None:
    """Six records of 30 KB sent together would be one 180 KB batch: over the CM's 64 KiB
    --max-frame, the producer splits them into frames it takes (it resent the one batch for ever)."""
    async with await Producer.connect(
        brokers.bootstrap, linger_ms=200, user="alice", password="alice-secret"
    ) as producer:
        for i in range(6):  # appended in one go: one batch, were it not for the frame limit
            assert producer.try_send("queue:frames", bytes([i]) * 30_000)
        await asyncio.wait_for(producer.flush(), 20)
    got = brokers.cli("consume", "queue:frames", "--count", "6", "--timeout", "10")
    assert [len(json.loads(line)["value"]) for line in got.stdout.splitlines()] == [30_000] * 6


def test_produce_over_the_cms_max_frame_fails_in_one_line(fresh: Brokers) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYBRIDMQ_")}
    argv = [HYBRIDMQ, "produce", "queue:frame", "-m", "b" * 100_000, "--bootstrap", fresh.bootstrap, *ALICE]
    try:
        big = subprocess.run(argv, capture_output=True, text=True, timeout=8, env=env)
    except subprocess.TimeoutExpired:
        big = None
    if big is None:
        pytest.fail("hybridmq produce of a message over the CM's --max-frame did not end in 8 s")
    assert big.returncode != 0 and "exceeds 65536" in big.stderr, big.stderr[-2000:]
    assert len(big.stderr.strip().splitlines()) == 1, big.stderr[-2000:]


def _frame(body: dict[str, Any]) -> bytes:
    data = msgpack.packb(body, use_bin_type=True)
    return struct.pack(">I", len(data)) + data


def _read(sock: socket.socket) -> dict[str, Any]:
    def exactly(n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            assert chunk, "closed"
            buf += chunk
        return buf

    (size,) = struct.unpack(">I", exactly(4))
    return dict(msgpack.unpackb(exactly(size)))


def test_mm_max_frame_is_announced_and_enforced(brokers: Brokers) -> None:
    with socket.create_connection(("127.0.0.1", brokers.mm_port), timeout=10) as s:
        s.sendall(
            _frame(
                {"t": HELLO, "v": 1, "id": "probe", "user": "cm", "role": "cm", "password": brokers.secret}
            )
        )
        ok = _read(s)
        assert ok["t"] == HELLO_OK and ok["max_frame"] == 262144, ok
        s.sendall(struct.pack(">I", 262145))  # one byte over --max-frame: refused from the prefix
        err = _read(s)
        assert (
            err["t"] == ERROR and err["code"] == ErrorCode.FRAME_TOO_LARGE and "exceeds 262144" in err["msg"]
        ), err


def test_cm_local_bind_is_a_second_client_listener(brokers: Brokers) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYBRIDMQ_")}
    local = f"127.0.0.1:{brokers.local_port}"
    argv = [HYBRIDMQ, "produce", "queue:local-bind", "-m", "via the second listener", "--bootstrap", local]
    sent = subprocess.run([*argv, *ALICE], capture_output=True, text=True, timeout=60, env=env)
    assert sent.returncode == 0, sent.stderr[-2000:]
    got = brokers.cli("consume", "queue:local-bind", "--count", "1", "--timeout", "5")
    assert json.loads(got.stdout)["value"] == "via the second listener", got.stderr


def test_cm_credentials_and_acl_from_the_environment_and_the_failure_delay(brokers: Brokers) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYBRIDMQ_")}
    base = [HYBRIDMQ, "produce", "queue:auth", "-m", "x", "--bootstrap", brokers.bootstrap]
    start = time.monotonic()
    ok = subprocess.run([*base, *ALICE], capture_output=True, text=True, timeout=60, env=env)
    assert ok.returncode == 0, ok.stderr[-2000:]
    start = time.monotonic()
    wrong = subprocess.run(
        [*base, "--user", "alice", "--password", "nope"], capture_output=True, text=True, timeout=60, env=env
    )
    took = time.monotonic() - start
    assert wrong.returncode != 0 and "authentication failed for user 'alice'" in wrong.stderr, wrong.stderr
    assert took >= 1.5, took  # --auth-failure-delay 1.5 (default 0.5)
    denied = subprocess.run(
        [*base, "--user", "bob", "--password", "bob-secret"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert denied.returncode != 0 and "ACL" in denied.stderr and "bob" in denied.stderr, denied.stderr


def test_log_level_of_each_process(brokers: Brokers) -> None:
    assert " INFO " in brokers.log("mm-0"), brokers.log("mm-0")[-2000:]  # --log-level INFO
    cm_log = brokers.log("cm-0")
    assert " INFO " not in cm_log and " DEBUG " not in cm_log, cm_log[-2000:]  # --log-level WARNING
    stats = brokers.admin(brokers.cm_http)
    assert stats["node"] == "cm-0" and stats["role"] == "cm"  # --name, --http-bind


def test_an_abandoned_queue_does_not_hold_the_producers_of_another(fresh: Brokers) -> None:
    assert fresh.cli("consume", "queue:abandoned", "--timeout", "0.5").returncode == 0  # nothing in it
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYBRIDMQ_")}
    common = ["--bootstrap", fresh.bootstrap, *ALICE]
    consumer = subprocess.Popen(
        [HYBRIDMQ, "consume", "queue:busy", "-n", "40", "--timeout", "6", *common],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    sent: subprocess.CompletedProcess[str] | None = None
    key = key_for("pc")
    try:
        time.sleep(1.0)  # subscribed: queue:busy is consumed as it is produced
        sent = subprocess.run(
            [
                HYBRIDMQ,
                "produce",
                "queue:busy",
                "-m",
                "b",
                "-n",
                "40",
                "--partition-type",
                "fixed",
                "--key",
                key,
                *common,
            ],
            capture_output=True,
            text=True,
            timeout=8,
            env=env,
        )
    except subprocess.TimeoutExpired:
        pass
    finally:
        if consumer.poll() is None:
            consumer.kill()
        consumer.wait()
    if sent is None:
        state = fresh.admin(fresh.mm_http)["partitions"]["pc"]
        pytest.fail(f"40 produces to a consumed queue held by the backlog of an abandoned one: {state}")
    assert sent.returncode == 0, sent.stderr[-2000:]


def test_handoff_timeout_zero_exits_at_once_without_a_handoff(tmp_path: Path) -> None:
    """``HYBRIDMQ_HANDOFF_TIMEOUT=0`` (``--handoff-timeout 0``): a SIGTERM'd MM exits without handing
    its primaries over, so its partition fails over instead (with the default, 10 s, it hands off:
    ``test_graceful_handoff.py``). Run as ``hybridmq local --replicas 2`` whose MMs inherit it."""
    d = tmp_path / "run"
    d.mkdir()
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HYBRIDMQ_")}
    out = tmp_path / "local.out"
    options = ["--mms", "2", "--replicas", "2", "--fixed", "1", "--on-demand-per-mm", "0"]
    with open(out, "wb") as f:
        proc = subprocess.Popen(
            [HYBRIDMQ, "local", *options, "--dir", str(d), "--port", "0"],
            stdout=f,
            stderr=subprocess.STDOUT,
            env={**clean, "HYBRIDMQ_HANDOFF_TIMEOUT": "0"},
        )

    def local(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [HYBRIDMQ, "local", *args, "--dir", str(d)]
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=clean)

    def state() -> dict[str, Any]:
        return dict(json.loads(local("state").stdout))

    try:
        deadline = time.monotonic() + 120
        while "hybridmq local: CMs at " not in out.read_text(errors="replace"):
            assert proc.poll() is None and time.monotonic() < deadline, out.read_text(errors="replace")[
                -2000:
            ]
            time.sleep(0.1)
        (before,) = state()["partitions"]
        victim = before["primary"]
        began = time.monotonic()
        assert local("kill", victim, "--signal", "TERM").returncode == 0
        while state()["processes"][victim] == "running":
            assert time.monotonic() - began < 5, "the MM did not exit at once"
            time.sleep(0.1)
        deadline = time.monotonic() + 20
        while (after := state())["partitions"][0]["epoch"] == before["epoch"]:
            assert time.monotonic() < deadline, after
            time.sleep(0.2)
        assert after["partitions"][0]["primary"] not in (None, victim), after
        assert not [h for h in after["handoffs"] if victim in h["message"]], after["handoffs"]
        assert [f for f in after["failovers"] if f"primary {victim} ->" in f["message"]], after["failovers"]
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
