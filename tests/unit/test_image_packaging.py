"""What the broker image installs: the wheel its Dockerfile builds carries no operator.

The builder stage of broker-image/Dockerfile is replayed outside Docker: its COPY instructions fill a
scratch build context, the same ``pip wheel`` builds the wheels, and the test reads the wheels'
file lists and entry points, then imports the broker, the local runner and the client from the
unpacked wheel alone.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BROKER_DOCKERFILE = REPO / "broker-image" / "Dockerfile"


def builder_copies(dockerfile: Path) -> list[tuple[str, str]]:
    """(source, destination) of each COPY of the builder stage (before the second FROM)."""
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    copies: list[tuple[str, str]] = []
    froms = 0
    for line in text.splitlines():
        word, _, rest = line.strip().partition(" ")
        if word.upper() == "FROM":
            froms += 1
        elif word.upper() == "COPY" and froms == 1 and not rest.startswith("--"):
            *sources, dest = rest.split()
            copies.extend((src, dest) for src in sources)
    return copies


def build_broker_wheels(tmp: Path) -> list[Path]:
    context = tmp / "src"
    context.mkdir()
    for src, dest in builder_copies(BROKER_DOCKERFILE):
        target = context / dest
        if dest.endswith("/") or dest == "./":
            target = target / Path(src).name
        target.parent.mkdir(parents=True, exist_ok=True)
        if (REPO / src).is_dir():
            shutil.copytree(REPO / src, target, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(REPO / src, target)
    dist = tmp / "dist"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--wheel-dir", str(dist), "."],
        cwd=context,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return sorted(dist.glob("*.whl"))


def test_broker_image_wheel_has_no_operator(tmp_path: Path) -> None:
    wheels = build_broker_wheels(tmp_path)
    assert [w.name.split("-")[0] for w in wheels] == ["hybridmq"]
    with zipfile.ZipFile(wheels[0]) as whl:
        names = whl.namelist()
        entry_points = next(whl.read(n).decode() for n in names if n.endswith(".dist-info/entry_points.txt"))
        whl.extractall(tmp_path / "unpacked")
    top_level = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top_level == {"hybridmq"}, top_level
    # The shared pieces the broker needs are in it: the wire protocol and the planner.
    assert "hybridmq/protocol/connection.py" in names
    assert "hybridmq/planner/plan.py" in names
    assert "hybridmq-operator" not in entry_points
    assert re.search(r"^hybridmq = hybridmq\.cli\.main:main$", entry_points, re.MULTILINE)

    # Everything the broker image runs imports from the wheel alone, without the operator.
    unpacked = tmp_path / "unpacked"
    probe = (
        "import sys, importlib\n"
        f"sys.path.insert(0, {str(unpacked)!r})\n"
        "for name in ('hybridmq.cli.main', 'hybridmq.local.controller', 'hybridmq.local.runner',\n"
        "             'hybridmq.broker.mm.server', 'hybridmq.broker.cm.server', 'hybridmq.client'):\n"
        "    importlib.import_module(name)\n"
        "outside = sorted(n for n, m in sys.modules.items() if n.split('.')[0] == 'hybridmq'\n"
        f"                 and not str(getattr(m, '__file__', '') or '').startswith({str(unpacked)!r}))\n"
        "operator = sorted(n for n in sys.modules if n.split('.')[0] == 'hybridmq_operator')\n"
        "print(outside, operator)\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    # Every hybridmq package has an __init__.py, so every module loaded has a __file__ to compare.
    assert proc.stdout.strip() == "[] []", proc.stdout
