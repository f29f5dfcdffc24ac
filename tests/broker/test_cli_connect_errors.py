"""`hybridmq produce|consume|admin` that cannot connect answer in one line on stderr, naming the fix,
with a non-zero exit status: plain TCP to a CM on TLS (it closes the HELLO without a word), a CA
that does not verify the CM's certificate, and no CM listening at all. Never a Python traceback.

The cluster runs on TLS with a throwaway CA (``LocalCluster(tls=True)``); the CLI is the installed
``hybridmq`` entry point, run as a subprocess.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hybridmq import pki
from hybridmq.local.runner import LocalCluster

HYBRIDMQ = shutil.which("hybridmq", path=str(Path(sys.executable).parent)) or "hybridmq"


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("clitls"), mms=1, tls=True) as c:
        yield c


@pytest.fixture(scope="module")
def wrong_ca(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("otherca") / "ca.crt"
    path.write_text(pki.new_ca("some other CA").cert)
    return path


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HYBRIDMQ_")}
    return subprocess.run(
        [HYBRIDMQ, *args], capture_output=True, text=True, timeout=60, env={**clean, **(env or {})}
    )


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    """The single stderr line of a failed command (asserts a non-zero exit and no traceback)."""
    assert result.returncode != 0, result
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize("command", ["produce", "consume", "admin"])
def test_plain_tcp_to_a_tls_cm_names_tls_and_the_ca(tls_cluster: LocalCluster, command: str) -> None:
    bootstrap = f"127.0.0.1:{tls_cluster.cm_port}"
    args = {
        "produce": ["produce", "queue:cli.tls", "-m", "hello"],
        "consume": ["consume", "queue:cli.tls", "-n", "1", "--timeout", "1"],
        "admin": ["admin", "stats"],
    }[command]
    line = one_line(run_cli(*args, "--bootstrap", bootstrap))
    assert line.startswith(f"hybridmq {command}: "), line
    assert "speaks TLS" in line and bootstrap in line, line
    assert "--tls-ca" in line and "HYBRIDMQ_TLS_CA" in line, line
    assert "<cluster>-cluster-ca-cert" in line, line


def test_the_hint_names_the_secret_of_a_cluster_service() -> None:
    """Through a cluster's client Service (``<cluster>.<namespace>.svc``) the Secret is named."""
    from hybridmq.cli.main import _ca_secret_hint

    assert (
        _ca_secret_hint("demo.shop.svc:7400") == "Secret demo-cluster-ca-cert of namespace shop, key ca.crt"
    )
    assert _ca_secret_hint("orders.prod.svc.cluster.local:7400,x:1").startswith(
        "Secret orders-cluster-ca-cert "
    )
    assert "<cluster>-cluster-ca-cert" in _ca_secret_hint("10.0.0.7:7400")


def test_wrong_ca_says_the_certificate_was_not_verified(tls_cluster: LocalCluster, wrong_ca: Path) -> None:
    bootstrap = f"127.0.0.1:{tls_cluster.cm_port}"
    line = one_line(
        run_cli("produce", "queue:cli.tls", "-m", "x", "--bootstrap", bootstrap, "--tls-ca", str(wrong_ca))
    )
    assert "not verified" in line and bootstrap in line and str(wrong_ca) in line, line
    assert "cluster-ca-cert" in line, line
    # The same through the environment.
    line = one_line(
        run_cli(
            "produce",
            "queue:cli.tls",
            "-m",
            "x",
            "--bootstrap",
            bootstrap,
            env={"HYBRIDMQ_TLS_CA": str(wrong_ca)},
        )
    )
    assert "not verified" in line, line


def test_right_ca_works(tls_cluster: LocalCluster) -> None:
    bootstrap = f"127.0.0.1:{tls_cluster.cm_port}"
    result = run_cli(
        "produce",
        "queue:cli.tls.ok",
        "-m",
        "x",
        "--bootstrap",
        bootstrap,
        "--tls-ca",
        str(tls_cluster.ca_file),
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("sent 1"), result.stdout


def test_no_cm_listening_is_one_line() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    line = one_line(run_cli("produce", "queue:cli.none", "-m", "x", "--bootstrap", f"127.0.0.1:{port}"))
    assert line.startswith("hybridmq produce: no CM reachable"), line


def test_a_cm_that_never_answers_is_named_with_the_wait() -> None:
    """A listener that accepts the connection and says nothing (a CM stalled under load): the line
    names the address and how long the handshake was waited for, not an empty reason."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        line = one_line(run_cli("produce", "queue:cli.silent", "-m", "x", "--bootstrap", f"127.0.0.1:{port}"))
    assert line.startswith("hybridmq produce: no CM reachable"), line
    assert f"127.0.0.1:{port}: no handshake within" in line, line
