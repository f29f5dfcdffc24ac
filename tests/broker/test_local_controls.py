"""``hybridmq local kill|start|state`` against the cluster running in ``--dir``.

The process controls go through the local controller, which runs only with ``--replicas``: against
a cluster started without it (or no cluster at all) they say so in one line and change nothing.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from local_cli import hybridmq, running_local

from hybridmq.client import BlockingConsumer, BlockingProducer, Message


def local(*args: str) -> subprocess.CompletedProcess[str]:
    return hybridmq("local", *args, timeout=120)


def running(directory: Path, *options: str) -> Iterator[tuple[Path, str]]:
    """``hybridmq local <options>`` (the installed command) in a subprocess: its directory and
    bootstrap."""
    with running_local(directory, *options) as run:
        yield run.dir, run.bootstrap


@pytest.fixture(scope="module")
def static_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """Shared by the module: the controls against it change nothing."""
    yield from running(tmp_path_factory.mktemp("static") / "local", "--mms", "1")


@pytest.fixture
def replicated_cluster(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    yield from running(tmp_path / "local", "--mms", "2", "--replicas", "2")


def roundtrip(bootstrap: str, dest: str) -> bytes:
    producer = BlockingProducer(bootstrap)
    try:
        producer.send(dest, b"still here")
    finally:
        producer.close()
    consumer = BlockingConsumer(bootstrap, dest)
    try:
        message = consumer.receive(timeout=30)
        assert isinstance(message, Message)
        return bytes(message.value)
    finally:
        consumer.close()


@pytest.mark.parametrize("action", [["kill", "mm-0"], ["start", "mm-0"], ["state"]])
def test_controls_without_replicas_say_so_in_one_line(
    static_cluster: tuple[Path, str], action: list[str]
) -> None:
    directory, bootstrap = static_cluster
    done = local("--dir", str(directory), *action)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "--replicas" in done.stderr
    assert roundtrip(bootstrap, "queue:controls") == b"still here"  # mm-0 was left alone


def test_controls_where_no_cluster_runs_say_so_in_one_line(tmp_path: Path) -> None:
    done = local("--dir", str(tmp_path / "nothing"), "kill", "mm-0")
    assert done.returncode != 0
    assert "Traceback" not in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert str(tmp_path / "nothing") in done.stderr


def test_controls_with_replicas_act_and_refuse_an_unknown_mm_in_one_line(
    replicated_cluster: tuple[Path, str],
) -> None:
    directory, _ = replicated_cluster
    unknown = local("--dir", str(directory), "kill", "mm-9")
    assert unknown.returncode != 0
    assert "Traceback" not in unknown.stderr, unknown.stderr
    assert unknown.stderr.strip() == "hybridmq local: cannot signal 'mm-9' (the brokers are cm-0, mm-0, mm-1)"
    killed = local("--dir", str(directory), "kill", "mm-1")
    assert killed.returncode == 0, killed.stderr
    state = local("--dir", str(directory), "state")
    assert state.returncode == 0, state.stderr
    seen = json.loads(state.stdout)
    assert "reports" in seen
    assert seen["processes"]["mm-1"].startswith("exited") and seen["processes"]["mm-0"] == "running"
    started = local("--dir", str(directory), "start", "mm-1")
    assert started.returncode == 0, started.stderr
    again = local("--dir", str(directory), "start", "mm-1")  # already running: refused, left alone
    assert again.returncode != 0
    assert again.stderr.strip() == "hybridmq local: mm-1 is running: kill it first"
    state = local("--dir", str(directory), "state")
    assert json.loads(state.stdout)["processes"]["mm-1"] == "running"
