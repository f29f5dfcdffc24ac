"""``hybridmq local --tls`` through the installed command: TLS on every listener, as ``--help`` says.

One ``hybridmq local --tls`` process for the module; every check is made from outside it: the CA
file it promises, a plain-TCP HELLO (by hand: 4-byte length + msgpack map) that must get no
answer, and ``hybridmq produce`` / ``hybridmq consume`` with and without ``--tls-ca``.
"""

from __future__ import annotations

import json
import socket
import struct
import subprocess
from collections.abc import Iterator

import msgpack
import pytest
from local_cli import LocalRun, running_local

HELLO, HELLO_OK = 1, 2


@pytest.fixture(scope="module")
def tls_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRun]:
    with running_local(tmp_path_factory.mktemp("local-tls") / "run", "--mms", "1", "--tls") as run:
        yield run


def _plain_hello(port: int) -> bytes:
    """A client HELLO over plain TCP; whatever the CM answers within 5 s (b"" if it closes)."""
    body = msgpack.packb({"t": HELLO, "v": 1, "id": "plain-probe", "role": "client"}, use_bin_type=True)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(struct.pack(">I", len(body)) + body)
        sock.settimeout(5)
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except (TimeoutError, ConnectionError):
            pass
    return answer


def _hello_ok(answer: bytes) -> bool:
    if len(answer) < 4 or len(answer) < 4 + struct.unpack(">I", answer[:4])[0]:
        return False
    try:
        frame = msgpack.unpackb(answer[4 : 4 + struct.unpack(">I", answer[:4])[0]], raw=False)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError):
        return False
    return isinstance(frame, dict) and frame.get("t") == HELLO_OK


def test_startup_line_says_tls_and_names_the_ca_it_wrote(tls_run: LocalRun) -> None:
    ca = tls_run.dir / "ca.crt"
    assert ca.is_file(), f"no CA written; startup line: {tls_run.startup}"
    assert "BEGIN CERTIFICATE" in ca.read_text()
    assert "TLS" in tls_run.startup and str(ca) in tls_run.startup, tls_run.startup


def test_a_plain_tcp_client_is_refused(tls_run: LocalRun) -> None:
    port = int(tls_run.bootstrap.rsplit(":", 1)[1])
    answer = _plain_hello(port)
    assert not _hello_ok(answer), "the CM answered a plain-TCP HELLO with HELLO_OK: no TLS"


def test_produce_and_consume_with_the_ca_round_trip_and_a_plain_producer_stores_nothing(
    tls_run: LocalRun,
) -> None:
    ca = str(tls_run.dir / "ca.crt")
    plain = None
    try:
        plain = tls_run.cli("produce", "queue:tls-cli", "-m", "plain", timeout=20)
    except subprocess.TimeoutExpired:  # still trying after 20 s: refused too
        pass
    if plain is not None:
        assert plain.returncode != 0, f"a plain-TCP producer was accepted: {plain.stdout}"
    sent = tls_run.cli("produce", "queue:tls-cli", "-m", "over-tls", "--count", "5", "--tls-ca", ca)
    assert sent.returncode == 0, sent.stderr[-2000:]
    assert sent.stdout.startswith("sent 5 to "), sent.stdout
    got = tls_run.cli("consume", "queue:tls-cli", "--count", "6", "--timeout", "3", "--tls-ca", ca)
    assert got.returncode == 0, got.stderr[-2000:]
    values = [json.loads(line)["value"] for line in got.stdout.splitlines()]
    assert values == ["over-tls"] * 5  # and not the plain producer's message


def test_a_client_without_the_ca_cannot_consume(tls_run: LocalRun) -> None:
    try:
        got = tls_run.cli("consume", "queue:tls-cli", "--count", "1", "--timeout", "3", timeout=20)
    except subprocess.TimeoutExpired:  # a client that never gets through is refused as well
        return
    assert got.returncode != 0 or got.stdout == "", got.stdout
