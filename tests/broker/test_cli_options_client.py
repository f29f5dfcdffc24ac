"""``hybridmq produce|consume|admin|hash-password`` options through the installed command, each checked
by its effect from outside (what ``consume`` prints, what ``admin`` answers, what the CM admits).

One ``hybridmq local --mms 1 --credentials F`` for the module (static partitions: ``fixed-0-0``,
``fixed-0-1``, ``od-0-0``, ``od-0-1``); ``F`` holds a line made by ``hybridmq hash-password`` and a
plain one. One ``hybridmq local --tls`` for ``--tls-server-name``. The rule checked for ``--key``:
a fixed producer's partition is crc32(key) over the writable fixed partitions in name order
(docs, ``broker/cm/server.py``), seen in the partition of the ids ``consume`` prints.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import zlib
from collections.abc import Iterator
from typing import Any

import pytest
from local_cli import HYBRIDMQ, LocalRun, hybridmq, running_local

ALICE = ("--user", "alice", "--password", "alice-secret")
CAROL_PASSWORD = "c4rol's pass phrase"
FIXED = ["fixed-0-0", "fixed-0-1"]  # hybridmq local --mms 1: 2 fixed + 2 on-demand partitions


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRun]:
    d = tmp_path_factory.mktemp("cli-client")
    hashed = hybridmq("hash-password", "carol", CAROL_PASSWORD)
    assert hashed.returncode == 0, hashed.stderr
    (d / "users.txt").write_text(f"{hashed.stdout.strip()}\nalice:alice-secret\n")
    with running_local(d / "run", "--mms", "1", "--credentials", str(d / "users.txt")) as local:
        yield local


def cli(
    run: LocalRun,
    *args: str,
    env: dict[str, str] | None = None,
    stdin: str | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """``hybridmq <args>`` with only the ``HYBRIDMQ_*`` variables given (none: ``--bootstrap`` of the
    run and alice's credentials on the command line)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HYBRIDMQ_")}
    argv = [HYBRIDMQ, *args] if env is not None else [HYBRIDMQ, *args, "--bootstrap", run.bootstrap, *ALICE]
    return subprocess.run(
        argv, input=stdin, capture_output=True, text=True, timeout=timeout, env={**clean, **(env or {})}
    )


def consumed(run: LocalRun, destination: str, *args: str) -> list[dict[str, Any]]:
    got = cli(run, "consume", destination, *args)
    assert got.returncode == 0, got.stderr[-2000:]
    return [json.loads(line) for line in got.stdout.splitlines()]


def partition_of(message: dict[str, Any]) -> str:
    return str(message["id"]).rpartition(":")[0]  # the id is <partition>:<offset>


def test_hash_password_line_is_accepted_by_the_cm_and_hides_the_password(run: LocalRun) -> None:
    line = hybridmq("hash-password", "carol", CAROL_PASSWORD).stdout.strip()
    user, _, stored = line.partition(":")
    assert user == "carol" and stored.startswith("pbkdf2$") and CAROL_PASSWORD not in line, line
    carol = ("--user", "carol", "--password", CAROL_PASSWORD, "--bootstrap", run.bootstrap)
    sent = hybridmq("produce", "queue:carol", "-m", "hashed login", *carol)
    assert sent.returncode == 0, sent.stderr[-2000:]
    wrong = hybridmq("produce", "queue:carol", "-m", "x", *carol[:3], "wrong", *carol[4:])
    assert wrong.returncode != 0 and "authentication failed for user 'carol'" in wrong.stderr, wrong.stderr


def test_produce_count_sends_that_many(run: LocalRun) -> None:
    sent = cli(run, "produce", "queue:count", "-m", "thrice", "-n", "3")
    assert sent.returncode == 0 and sent.stdout.startswith("sent 3 to "), (sent.stdout, sent.stderr)
    got = consumed(run, "queue:count", "--count", "10", "--timeout", "2")
    assert [m["value"] for m in got] == ["thrice"] * 3


def test_produce_without_message_sends_each_stdin_line(run: LocalRun) -> None:
    sent = cli(run, "produce", "queue:stdin", "--partition-type", "fixed", "--key", "s", stdin="a\nb b\nc\n")
    assert sent.returncode == 0 and "sent 3" in sent.stderr, (sent.stdout, sent.stderr)
    got = consumed(run, "queue:stdin", "--count", "10", "--timeout", "2")
    assert [m["value"] for m in got] == ["a", "b b", "c"]


def test_key_with_fixed_partition_type_lands_on_the_partition_the_key_maps_to(run: LocalRun) -> None:
    keys = ["k0", "k1", "k2", "k3", "k4", "k5"]
    expected = {k: FIXED[zlib.crc32(k.encode()) % len(FIXED)] for k in keys}
    assert set(expected.values()) == set(FIXED)  # the keys reach both fixed partitions
    for k in keys:
        for _ in range(2):  # the same key twice: the same partition
            sent = cli(run, "produce", "queue:keyed", "-m", k, "--key", k, "--partition-type", "fixed")
            assert sent.returncode == 0 and f" to {expected[k]} " in sent.stdout, (
                k,
                sent.stdout,
                sent.stderr,
            )
    got = consumed(run, "queue:keyed", "--count", "12", "--timeout", "5")
    assert sorted(m["value"] for m in got) == sorted(keys * 2)
    assert all(partition_of(m) == expected[m["value"]] for m in got), got
    default = cli(run, "produce", "queue:unkeyed", "-m", "x", "--key", "k0")  # default: on-demand
    assert default.returncode == 0 and " to od-0-" in default.stdout, default.stdout
    assert partition_of(consumed(run, "queue:unkeyed", "--count", "1", "--timeout", "5")[0]).startswith(
        "od-0-"
    )


def test_match_glob_and_regex_select_destinations(run: LocalRun) -> None:
    for d in ("queue:m.a", "queue:m.b", "queue:mx.c", "queue:n.d"):
        assert cli(run, "produce", d, "-m", d).returncode == 0
    assert consumed(run, "queue:m.*", "--timeout", "1") == []  # default exact: no such destination
    glob = consumed(run, "queue:m.*", "--match", "glob", "--count", "2", "--timeout", "5")
    assert sorted(m["destination"] for m in glob) == ["queue:m.a", "queue:m.b"]
    regex = consumed(run, r"queue:(mx|n)\..", "--match", "regex", "--count", "2", "--timeout", "5")
    assert sorted(m["destination"] for m in regex) == ["queue:mx.c", "queue:n.d"]


def test_durable_subscription_resumes_after_the_last_consumed_message(run: LocalRun) -> None:
    assert consumed(run, "topic:dur", "--durable", "d1", "--timeout", "1") == []  # creates it
    for i in range(3):
        assert (
            cli(
                run, "produce", "topic:dur", "-m", f"m{i}", "--partition-type", "fixed", "--key", "d"
            ).returncode
            == 0
        )
    assert consumed(run, "topic:dur", "--timeout", "1") == []  # a plain subscriber sees only new ones
    first = consumed(run, "topic:dur", "--durable", "d1", "--count", "1", "--timeout", "5")
    assert [m["value"] for m in first] == ["m0"]
    rest = consumed(run, "topic:dur", "--durable", "d1", "--count", "5", "--timeout", "2")
    assert [m["value"] for m in rest] == ["m1", "m2"]
    assert consumed(run, "topic:dur", "--durable", "d1", "--timeout", "1") == []


def test_count_and_timeout_end_consume(run: LocalRun) -> None:
    assert cli(run, "produce", "queue:end", "-m", "x", "-n", "5").returncode == 0
    start = time.monotonic()
    two = consumed(run, "queue:end", "--count", "2", "--timeout", "30")
    assert len(two) == 2 and time.monotonic() - start < 15  # ended by --count, not by --timeout
    start = time.monotonic()
    rest = consumed(run, "queue:end", "--timeout", "1.5")
    took = time.monotonic() - start
    assert len(rest) == 3 and took < 15, took  # ended by --timeout once the queue is empty
    start = time.monotonic()
    assert consumed(run, "queue:nothing-here", "-n", "1", "--timeout", "1") == []
    assert time.monotonic() - start < 10


def test_admin_commands_print_json_parts_with_their_keys(run: LocalRun) -> None:
    def admin(command: str) -> list[dict[str, Any]]:
        got = cli(run, "admin", command)
        assert got.returncode == 0, got.stderr[-2000:]
        parts = [json.loads(line) for line in got.stdout.splitlines()]
        assert parts and [p["part"] for p in parts] == list(range(1, len(parts) + 1))
        assert all(p["of"] == len(parts) for p in parts)
        return [p["data"] for p in parts]

    (stats,) = admin("stats")
    assert stats["node"] == "cm-0" and stats["role"] == "cm" and stats["mm_links"] == {"mm-0": True}
    (directory,) = admin("directory")
    assert sorted(b["name"] for b in directory["brokers"]) == ["cm-0", "mm-0"]
    assert sorted(p["name"] for p in directory["partitions"]) == [*FIXED, "od-0-0", "od-0-1"]
    sessions = admin("sessions")
    assert any(s["user"] == "alice" for s in sessions), sessions  # the admin command's own session
    (mm,) = admin("mm-stats")
    assert mm["node"] == "mm-0" and mm["role"] == "mm"
    assert sorted(mm["partitions"]) == [*FIXED, "od-0-0", "od-0-1"]


def test_environment_variables_stand_for_the_flags(run: LocalRun) -> None:
    env = {"HYBRIDMQ_BOOTSTRAP": run.bootstrap, "HYBRIDMQ_USER": "alice", "HYBRIDMQ_PASSWORD": "alice-secret"}
    sent = cli(run, "produce", "queue:env", "-m", "by env", env=env)
    assert sent.returncode == 0, sent.stderr[-2000:]
    got = cli(run, "consume", "queue:env", "--count", "1", "--timeout", "5", env=env)
    assert got.returncode == 0 and json.loads(got.stdout)["value"] == "by env", got.stderr[-2000:]
    admin = cli(run, "admin", "stats", env=env)
    assert admin.returncode == 0 and json.loads(admin.stdout)["data"]["node"] == "cm-0", admin.stderr
    wrong = cli(run, "produce", "queue:env", "-m", "x", env={**env, "HYBRIDMQ_PASSWORD": "wrong"})
    assert wrong.returncode != 0 and "authentication failed for user 'alice'" in wrong.stderr, wrong.stderr
    nobody = cli(run, "produce", "queue:env", "-m", "x", env={"HYBRIDMQ_BOOTSTRAP": "127.0.0.1:1"})
    assert nobody.returncode != 0 and "127.0.0.1:1" in nobody.stderr, nobody.stderr  # the bootstrap is used


@pytest.fixture(scope="module")
def tls_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRun]:
    with running_local(tmp_path_factory.mktemp("cli-client-tls") / "run", "--mms", "1", "--tls") as local:
        yield local


def test_tls_server_name_is_the_name_the_certificate_is_checked_for(tls_run: LocalRun) -> None:
    ca = str(tls_run.dir / "ca.crt")  # the throwaway CA's certificate is for localhost and 127.0.0.1
    for command in (["produce", "queue:sni", "-m", "x"], ["admin", "stats"]):
        good = tls_run.cli(*command, "--tls-ca", ca, "--tls-server-name", "localhost")
        assert good.returncode == 0, good.stderr[-2000:]
        bad = tls_run.cli(*command, "--tls-ca", ca, "--tls-server-name", "not-the-cm.example")
        assert bad.returncode != 0 and "was not verified" in bad.stderr, bad.stderr[-2000:]
    env = {"HYBRIDMQ_BOOTSTRAP": tls_run.bootstrap, "HYBRIDMQ_TLS_CA": ca}
    by_env = cli(tls_run, "admin", "stats", env={**env, "HYBRIDMQ_TLS_SERVER_NAME": "not-the-cm.example"})
    assert by_env.returncode != 0 and "was not verified" in by_env.stderr, by_env.stderr[-2000:]
    assert (
        cli(tls_run, "admin", "stats", env={**env, "HYBRIDMQ_TLS_SERVER_NAME": "localhost"}).returncode == 0
    )


def test_count_without_message_or_below_one_is_refused_in_one_line(run: LocalRun) -> None:
    """``-n`` repeats ``-m``: with stdin lines it would do nothing, so it is refused (as ``hybridmq local``
    refuses a flag that does nothing in the mode asked for), and so is a count below 1."""
    lines = cli(run, "produce", "queue:n-stdin", "-n", "2", stdin="a\nb\nc\n")
    assert lines.returncode != 0, (lines.stdout, lines.stderr)
    zero = cli(run, "produce", "queue:n-stdin", "-m", "x", "-n", "0")
    assert zero.returncode != 0, (zero.stdout, zero.stderr)
    for refused in (lines, zero):
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr[-2000:]  # no traceback
        assert refused.stderr.startswith("hybridmq produce: -n/--count"), refused.stderr
    assert consumed(run, "queue:n-stdin", "--timeout", "1") == []  # nothing was sent
