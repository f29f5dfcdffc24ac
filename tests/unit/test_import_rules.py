"""The dependency rules between packages and inside the broker, checked by import-linter
(contracts in pyproject.toml).

api <- protocol <- client; api <- protocol <- broker; api <- planner <- operator; nothing in the
``hybridmq`` distribution imports the operator; inside the broker, imports go down its layers.
The second test plants one violation at a time in a copy of the sources and expects the matching
contract to break, so the check is known to bite.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(root: Path, pythonpath: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS="400")  # one line per contract in the report
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", str(root / "pyproject.toml")],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_package_rules_hold() -> None:
    proc = lint_imports(REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout


API = "hybridmq.api imports nothing of ours"
PROTOCOL = "hybridmq.protocol (the wire framing) builds on hybridmq.api only"
CLIENT = "the client speaks the wire through hybridmq.protocol, never through the broker"
BROKER = "the broker uses api and protocol, never the client, the dev runner, the planner or the operator"
PLANNER = "the planner is pure: hybridmq.api only, no Kubernetes"
PKI = "hybridmq.pki (the certificate authority) imports nothing of ours"
NO_OPERATOR = "nothing the broker image carries imports the operator"
NO_SERVER = "no module of the broker imports a server but the servers themselves"
LAYERS = "the broker is layered: servers, handlers, contexts, replica manager, partition, replication, log"


@pytest.mark.parametrize(
    ("module", "line", "broken"),
    [
        ("api/frames.py", "import hybridmq.protocol", {API}),
        ("client/producer/accumulator.py", "from hybridmq.broker.log import config", {CLIENT}),
        ("local/controller.py", "from hybridmq_operator import names", {NO_OPERATOR}),
        ("planner/plan.py", "import kubernetes", {PLANNER}),
        ("pki/ca.py", "from hybridmq.api import frames", {PKI}),
        # Under TYPE_CHECKING too: the cycle it makes is there for a type checker and a reader.
        ("broker/mm/acks.py", "from hybridmq.broker.mm.server import MessageManager", {NO_SERVER, LAYERS}),
        (
            "broker/transactions/resolver.py",
            "if TYPE_CHECKING:\n    from hybridmq.broker.cm.server import ConnectionManager",
            {NO_SERVER, LAYERS},
        ),
        # The cycles the layers ended: the partition's transaction participant typed with its host,
        # the replica manager given the whole MM context, a batcher typed with its transport.
        (
            "broker/transactions/participant.py",
            "if TYPE_CHECKING:\n    from hybridmq.broker.mm.partition import PartitionHost",
            {LAYERS},
        ),
        (
            "broker/mm/replica_manager.py",
            "if TYPE_CHECKING:\n    from hybridmq.broker.mm.context import MMContext",
            {LAYERS},
        ),
        (
            "broker/mm/replica_batch.py",
            "from hybridmq.broker.mm.replica_transport import PeerLinks",
            {LAYERS},
        ),
        ("broker/log/segment.py", "from hybridmq.broker.mm import storage", {LAYERS}),
        # The broker imports the protocol, so it now reaches the client too (the rule is transitive).
        ("protocol/codec.py", "from hybridmq.client import message", {PROTOCOL, BROKER}),
    ],
)
def test_a_planted_violation_breaks_its_contract(
    tmp_path: Path, module: str, line: str, broken: set[str]
) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for package in ("broker-image/hybridmq", "operator/hybridmq_operator"):
        shutil.copytree(REPO / package, tmp_path / package, ignore=ignore)
    shutil.copy2(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    planted = tmp_path / "broker-image" / "hybridmq" / module
    planted.write_text(planted.read_text() + f"\n{line}  # planted by the test\n")

    # The copies come first on sys.path, ahead of the venv's editable installs.
    proc = lint_imports(tmp_path, f"{tmp_path / 'broker-image'}{os.pathsep}{tmp_path / 'operator'}")
    assert proc.returncode != 0, proc.stdout + proc.stderr
    report = proc.stdout.splitlines()
    assert {ln.removesuffix(" BROKEN") for ln in report if ln.endswith(" BROKEN")} == broken, proc.stdout
    assert f"Contracts: {10 - len(broken)} kept, {len(broken)} broken." in report, proc.stdout
