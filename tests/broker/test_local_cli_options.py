"""``hybridmq local`` options through the installed command, each checked by its effect from outside.

One ``hybridmq local --mms 1 --cms 2 --replicas 1 --fixed 2 --on-demand-per-mm 1 --fsync always
--max-redeliveries 1 --credentials F --acl F`` for the module (the process controls need the
controller that ``--replicas`` brings):

* the layout flags reach the brokers: two CMs that each serve, the partitions planned as asked, the
  MMs' fsync and redelivery limit on their command lines;
* ``--credentials`` / ``--acl``: a wrong password is refused with the broker's message, a user
  without a grant is refused on that destination, a granted one produces and consumes;
* ``--max-redeliveries 1``: a message given back (nack) every time is delivered twice, then it is
  in ``queue:_DMQ`` with its origin and the reason;
* ``kill cm-0`` / ``start cm-0`` (and ``--signal STOP`` / ``CONT``): clients cannot connect while it
  is down, ``local state`` says so, and they work again once it is started;
* flags that would have no effect in the mode asked for are refused in one line.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from local_cli import LocalRun, hybridmq, running_local

from hybridmq.client import Consumer, Message, Producer

ALICE = ("--user", "alice", "--password", "alice-secret")
BOB = ("--user", "bob", "--password", "bob-secret")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRun]:
    d = tmp_path_factory.mktemp("local-options")
    users = d / "users.txt"
    users.write_text("# user:password\nalice:alice-secret\nbob:bob-secret\n")
    acl = d / "acl.json"
    acl.write_text(
        json.dumps(
            {
                "alice": {"produce": ["queue:*"], "consume": ["queue:*"]},
                "bob": {"produce": [], "consume": ["queue:bob.*"]},
            }
        )
    )
    options = ["--mms", "1", "--cms", "2", "--replicas", "1", "--max-redeliveries", "1"]
    options += ["--fixed", "2", "--on-demand-per-mm", "1", "--fsync", "always"]
    with running_local(d / "run", *options, "--credentials", str(users), "--acl", str(acl)) as local:
        yield local


def test_startup_line_names_the_options_in_force(run: LocalRun) -> None:
    assert "authentication on, users from " in run.startup and "users.txt" in run.startup, run.startup
    assert "ACLs from " in run.startup and "acl.json" in run.startup, run.startup
    assert "at most 1 redeliveries" in run.startup, run.startup


def test_layout_flags_reach_the_brokers(run: LocalRun) -> None:
    assert len(run.bootstraps) == 2, run.startup  # --cms 2: each CM serves on its own
    for cm in run.bootstraps:
        sent = hybridmq("produce", "queue:via-each-cm", "-m", cm, *ALICE, "--bootstrap", cm)
        assert sent.returncode == 0, sent.stderr[-2000:]
    got = run.cli("consume", "queue:via-each-cm", "--count", "2", "--timeout", "10", *ALICE)
    assert sorted(json.loads(line)["value"] for line in got.stdout.splitlines()) == sorted(run.bootstraps)
    done = run.local("state")
    partitions = json.loads(done.stdout)["partitions"]
    assert sorted(p["type"] for p in partitions) == ["fixed", "fixed", "on-demand"]  # --fixed 2, 1 per MM
    mms = [p for p in psutil.Process(run.proc.pid).children() if " mm " in " ".join(p.cmdline())]
    assert len(mms) == 1
    cmdline = " ".join(mms[0].cmdline())
    assert "--fsync always" in cmdline and "--max-redeliveries 1" in cmdline, cmdline


def test_a_wrong_password_is_refused_with_a_clear_error(run: LocalRun) -> None:
    wrong = run.cli("produce", "queue:auth", "-m", "x", "--user", "alice", "--password", "wrong")
    assert wrong.returncode != 0
    assert "authentication failed for user 'alice'" in wrong.stderr, wrong.stderr[-2000:]
    nobody = run.cli("produce", "queue:auth", "-m", "x")  # no user at all: authentication is on
    assert nobody.returncode != 0
    assert "authentication failed" in nobody.stderr, nobody.stderr[-2000:]
    for refused in (wrong, nobody):  # one line, no traceback
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr[-2000:]


def test_a_user_without_a_grant_is_refused_and_a_granted_one_works(run: LocalRun) -> None:
    denied = run.cli("produce", "queue:bob.mail", "-m", "forged", *BOB)  # bob may not produce at all
    assert denied.returncode != 0
    assert "ACL" in denied.stderr and "bob" in denied.stderr, denied.stderr[-2000:]
    elsewhere = run.cli("consume", "queue:jobs", "--count", "1", "--timeout", "2", *BOB)
    assert elsewhere.returncode != 0
    assert "ACL" in elsewhere.stderr and "queue:jobs" in elsewhere.stderr, elsewhere.stderr[-2000:]
    for refused in (denied, elsewhere):  # one line, no traceback
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr[-2000:]
    sent = run.cli("produce", "queue:bob.mail", "-m", "for bob", "--count", "2", *ALICE)
    assert sent.returncode == 0, sent.stderr[-2000:]
    got = run.cli("consume", "queue:bob.mail", "--count", "2", "--timeout", "10", *BOB)
    assert got.returncode == 0, got.stderr[-2000:]
    assert [json.loads(line)["value"] for line in got.stdout.splitlines()] == ["for bob"] * 2


async def test_max_redeliveries_moves_a_nacked_message_to_the_dmq_after_the_limit(run: LocalRun) -> None:
    async with await Producer.connect(run.bootstrap, user="alice", password="alice-secret") as producer:
        await producer.send("queue:poison", b"fails every time")
    deliveries = []
    async with await Consumer.connect(
        run.bootstrap, "queue:poison", auto_ack=False, user="alice", password="alice-secret"
    ) as consumer:
        while True:
            try:
                m = await consumer.receive(timeout=3 if len(deliveries) >= 2 else 15)
            except TimeoutError:
                break
            assert isinstance(m, Message)
            deliveries.append(m.delivery_count)
            consumer.nack(m)  # processing failed: give it back
            assert len(deliveries) <= 6, "never moved to queue:_DMQ"
    assert deliveries == [1, 2]  # the first delivery and 1 redelivery (the default, 5, gives 6)
    dead = run.cli("consume", "queue:_DMQ", "--count", "1", "--timeout", "10", *ALICE)
    assert dead.returncode == 0, dead.stderr[-2000:]
    [moved] = [json.loads(line) for line in dead.stdout.splitlines()]
    assert moved["value"] == "fails every time" and moved["orig"] == "queue:poison"
    assert "maximum redeliveries (1) exceeded" in moved["reason"], moved


def _state(run: LocalRun) -> dict[str, str]:
    done = run.local("state")
    assert done.returncode == 0, done.stderr
    processes: dict[str, str] = json.loads(done.stdout)["processes"]
    return processes


def _roundtrip(run: LocalRun, queue: str) -> list[str]:
    sent = run.cli("produce", queue, "-m", "through cm-0", *ALICE, timeout=30)
    assert sent.returncode == 0, sent.stderr[-2000:]
    got = run.cli("consume", queue, "--count", "1", "--timeout", "10", *ALICE, timeout=30)
    assert got.returncode == 0, got.stderr[-2000:]
    return [json.loads(line)["value"] for line in got.stdout.splitlines()]


def test_kill_and_start_a_cm(run: LocalRun) -> None:
    assert _state(run)["cm-0"] == "running"
    killed = run.local("kill", "cm-0")
    assert killed.returncode == 0, killed.stderr
    assert _state(run)["cm-0"].startswith("exited")
    down = run.cli("produce", "queue:cm-back", "-m", "x", *ALICE, timeout=30)
    assert down.returncode != 0
    assert "no CM reachable" in down.stderr, down.stderr[-2000:]
    again = run.local("kill", "cm-0")  # killing what is down changes nothing, and says what it did
    assert again.returncode == 0, again.stderr
    started = run.local("start", "cm-0")
    assert started.returncode == 0, started.stderr
    assert _state(run)["cm-0"] == "running"
    assert _roundtrip(run, "queue:cm-back") == ["through cm-0"]


def test_stop_and_continue_a_cm(run: LocalRun) -> None:
    stopped = run.local("kill", "cm-0", "--signal", "STOP")
    assert stopped.returncode == 0, stopped.stderr
    try:
        assert _state(run)["cm-0"] == "stopped"
        running = run.local("start", "cm-0")  # its process is still there: refused, left alone
        assert running.returncode != 0
        assert (
            running.stderr.strip()
            == "hybridmq local: cm-0 is stopped (--signal CONT resumes it): kill it first"
        )
    finally:
        resumed = run.local("kill", "cm-0", "--signal", "CONT")
    assert resumed.returncode == 0, resumed.stderr
    assert _state(run)["cm-0"] == "running"
    assert _roundtrip(run, "queue:cm-cont") == ["through cm-0"]


def test_a_stopped_cm_ends_on_term_and_starts_again(run: LocalRun) -> None:
    assert run.local("kill", "cm-0", "--signal", "STOP").returncode == 0
    terminated = run.local("kill", "cm-0", "--signal", "TERM", timeout=60)
    assert terminated.returncode == 0, terminated.stderr
    assert _state(run)["cm-0"].startswith("exited")
    started = run.local("start", "cm-0")
    assert started.returncode == 0, started.stderr
    assert _roundtrip(run, "queue:cm-term") == ["through cm-0"]


def test_a_cm_starts_while_another_one_is_stopped(run: LocalRun) -> None:
    """``start cm-0`` waits until the CMs are linked to the MMs, but not for a frozen ``cm-1``."""
    assert run.local("kill", "cm-1", "--signal", "STOP").returncode == 0
    try:
        assert run.local("kill", "cm-0").returncode == 0
        began = time.monotonic()
        started = run.local("start", "cm-0")
        assert started.returncode == 0, started.stderr
        # Waiting for the frozen cm-1 would take the whole 60 s start bound (and fail); a loaded
        # machine takes 15-20 s to start a Python process and link it.
        assert time.monotonic() - began < 45
    finally:
        assert run.local("kill", "cm-1", "--signal", "CONT").returncode == 0
    assert _state(run) == {"cm-0": "running", "cm-1": "running", "mm-0": "running"}
    assert _roundtrip(run, "queue:cm-beside-stopped") == ["through cm-0"]


def test_an_unknown_broker_is_refused_in_one_line(run: LocalRun) -> None:
    done = run.local("start", "cm-7")
    assert done.returncode != 0
    assert done.stderr.strip() == "hybridmq local: cannot start 'cm-7' (the brokers are cm-0, cm-1, mm-0)"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--fixed", "2"], "hybridmq local: --fixed needs --replicas (the local controller plans them)"),
        (
            ["--retention-after-drain", "5"],
            "hybridmq local: --retention-after-drain needs --replicas (the local controller plans them)",
        ),
        (
            ["--replicas", "1", "--fixed-per-mm", "3"],
            "hybridmq local: --fixed-per-mm is for static partitions; with --replicas use --fixed",
        ),
        (
            ["--signal", "STOP"],
            "hybridmq local: --signal goes with kill (hybridmq local kill <broker> --signal ...)",
        ),
        (["--max-redeliveries", "-1"], "hybridmq local: --max-redeliveries must be at least 0, not -1"),
        (
            ["--mms", "1", "--replicas", "2"],
            "hybridmq local: --replicas 2 needs at least as many MMs (--mms)",
        ),
    ],
)
def test_a_flag_without_effect_is_refused_in_one_line(
    tmp_path: Path, options: list[str], message: str
) -> None:
    started = time.monotonic()
    done = hybridmq("local", *options, "--dir", str(tmp_path / "run"), "--port", "0")
    assert done.returncode != 0
    assert done.stderr.strip() == message
    assert not (tmp_path / "run" / "cluster-secret").exists()  # nothing was started
    assert time.monotonic() - started < 20


@pytest.mark.parametrize(
    ("flag", "content", "message"),
    [
        ("--credentials", "# nobody\n", "names no user"),
        ("--acl", '{"alice": ["queue:*"]}', 'not {"<user>"'),
        ("--acl", "{not json", "Expecting property name"),
    ],
)
def test_an_auth_file_the_cm_could_not_use_is_refused_in_one_line(
    tmp_path: Path, flag: str, content: str, message: str
) -> None:
    (tmp_path / "file").write_text(content)
    done = hybridmq("local", flag, str(tmp_path / "file"), "--dir", str(tmp_path / "run"), "--port", "0")
    assert done.returncode != 0
    assert done.stderr.startswith(f"hybridmq local: {flag} {tmp_path / 'file'}: ") and message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
