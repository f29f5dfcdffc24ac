"""`make test`'s worker scheduling (tests/suite_schedule.py), run the way `make test` runs it: pytest
with xdist workers and `--dist loadgroup` in a subprocess, over a small suite of its own whose
session fixtures stand in for the control plane and Spark. What must hold: every module that uses a
shared session fixture (or is marked ``spark``) runs in that group's worker, so the fixture is made
once per run; the other modules spread over the workers; the control plane is let go right after
the last test of its group, in workers and in one process alike."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
NO_CACHE = ["-p", "no:cacheprovider"]

CONFTEST = """
import json, os, sys
import pytest
sys.path.insert(0, {tests!r})
import suite_schedule

def pytest_xdist_make_scheduler(config, log):
    return suite_schedule.make_scheduler(config, log)

def pytest_configure_node(node):
    suite_schedule.configure_node(node)

def pytest_collection_modifyitems(config, items):
    suite_schedule.order_and_publish(config, items)

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield
    if suite_schedule.last_of_group(item, nextitem, "local_cluster"):
        _made("released after " + item.nodeid)

def _made(what):
    with open(os.environ["MADE_LOG"], "a") as f:
        f.write(json.dumps([what, os.environ.get("PYTEST_XDIST_WORKER", "main")]) + "\\n")

@pytest.fixture(scope="session")
def local_cluster():
    _made("local_cluster")
    return "cluster"

@pytest.fixture(scope="session")
def spark():
    _made("spark")
    return "spark"

@pytest.fixture
def ran(request):
    yield
    _made(request.node.nodeid)
"""

USES_CLUSTER = """
import time
def test_one(local_cluster, ran): time.sleep(0.2)
def test_two(ran): time.sleep(0.2)
"""
USES_SPARK = """
import time
def test_one(spark, ran): time.sleep(0.2)
"""
MARKED_SPARK = """
import time
import pytest
pytestmark = pytest.mark.spark  # a Spark of its own, not the shared one
def test_one(ran): time.sleep(0.2)
"""
ALONE = """
import time
def test_one(ran): time.sleep(0.3)
def test_two(ran): time.sleep(0.3)
"""


def _suite(tmp_path: Path) -> Path:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text(CONFTEST.format(tests=str(TESTS)))
    modules = {
        "test_k8s_a.py": USES_CLUSTER,
        "test_k8s_b.py": USES_CLUSTER,
        "test_k8s_c.py": USES_CLUSTER,
        "test_spark_a.py": USES_SPARK,
        "test_spark_b.py": USES_SPARK,
        "test_demo.py": MARKED_SPARK,
        **{f"test_alone_{i}.py": ALONE for i in range(4)},
    }
    for name, body in modules.items():
        (suite / name).write_text(textwrap.dedent(body))
    return suite


def _run(tmp_path: Path, workers: int) -> list[tuple[str, str]]:
    """Run the suite through pytest in a subprocess; what was made and run, in order, and where."""
    suite = _suite(tmp_path)
    made_log = tmp_path / "made.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", str(workers), "--dist", "loadgroup", "-q", *NO_CACHE, "."],
        cwd=suite,
        capture_output=True,
        text=True,
        timeout=120,
        env={"MADE_LOG": str(made_log), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "17 passed" in done.stdout, done.stdout[-2000:]

    return [tuple(json.loads(line)) for line in made_log.read_text().splitlines()]


def _released_after_last_user(made: list[tuple[str, str]]) -> None:
    """The control plane is let go once, right after the last test of the modules that use it (the
    last of its group), not at the end of the run."""
    released = [(i, what) for i, (what, _) in enumerate(made) if what.startswith("released after ")]
    assert len(released) == 1, made
    at, what = released[0]
    users = [i for i, (w, _) in enumerate(made) if w.startswith("test_k8s_")]  # its modules' tests
    assert users and at > max(users), made
    assert what.removeprefix("released after ") == made[max(users)][0], made
    assert at < len(made) - 1, made  # other tests ran after it


def test_modules_sharing_a_session_fixture_run_in_one_worker_and_make_it_once(tmp_path: Path) -> None:
    made = _run(tmp_path, workers=3)
    _released_after_last_user(made)
    fixtures = [what for what, _ in made if what in ("local_cluster", "spark")]
    assert sorted(fixtures) == ["local_cluster", "spark"], made  # each made once in the whole run
    workers_of: dict[str, set[str]] = defaultdict(set)
    for what, worker in made:
        if "::" in what:
            workers_of[what.split("::")[0]].add(worker)
    assert len(set().union(*(workers_of[f"test_k8s_{x}.py"] for x in "abc"))) == 1, workers_of
    # the Spark users, and the module marked spark, share a worker: never two Spark JVMs at once
    spark_users = [workers_of[f"test_spark_{x}.py"] for x in "ab"] + [workers_of["test_demo.py"]]
    assert len(set().union(*spark_users)) == 1, workers_of
    # the modules of their own are spread: more than one worker ran them
    assert len(set().union(*(workers_of[f"test_alone_{i}.py"] for i in range(4)))) > 1, workers_of


def test_in_one_process_the_control_plane_is_let_go_after_its_last_user(tmp_path: Path) -> None:
    made = _run(tmp_path, workers=0)
    _released_after_last_user(made)
    tests = [what for what, _ in made if "::" in what and not what.startswith("released")]
    k8s = [i for i, what in enumerate(tests) if what.startswith("test_k8s_")]
    assert k8s == list(range(len(k8s))), tests  # the control plane's users run first, together
