"""How ``make test`` spreads the suite over pytest-xdist workers (``--dist loadgroup``).

A *group* goes to one worker whole, its tests in file order. A test module that uses one of the
session's expensive fixtures belongs to that fixture's group, so the thing is made once:

- ``local_cluster`` (the local control plane): ``kubernetes``;
- ``docker`` and ``kind_cluster`` (the Docker engine, the images built once, the kind cluster, node
  loss last) and ``spark`` (one SparkSession): ``heavy``. One group, so never side by side: kind
  keeps both cores busy, and Spark gives a Python worker it starts a fixed 10 s to connect back.
  A module marked ``spark`` that starts a Spark of its own (the demo's audit) joins that group too.

Every other module is a group of its own, so a module-scoped broker cluster starts once. The groups
are found from what the tests really use, not from a list kept by hand: each worker writes the
module -> group table it collected to a file the controller named (``pytest_configure_node``), and
the controller's scheduler reads it. Groups go out longest first, so the long serial groups start at
once and the short modules fill the other workers around them.

Our own scheduler because xdist's ``xdist_group`` mark does not take effect under pytest 9.2 (xdist
renames the item through its old ``_nodeid`` attribute).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling

# The session fixtures whose users share one worker, and the group each one names.
SHARED_FIXTURES = {
    "local_cluster": "kubernetes",
    "kind_cluster": "heavy",
    "docker": "heavy",
    "spark": "heavy",
}
# The order groups are handed to workers: the long serial ones first (measured: the control plane's
# group is about a third of the suite's test time, the images, kind and Spark a quarter), then
# directories by their tests' length.
GROUP_ORDER = ["kubernetes", "heavy", "tests/adversarial", "tests/e2e", "tests/broker"]
# Marks whose modules join a group when they use none of the fixtures above.
SHARED_MARKS = {"spark": "heavy"}
_GROUPS_FILE = "hybridmq_groups_file"  # the workerinput key naming the group table's file
_FILE_KEY = pytest.StashKey[str]()  # the controller's copy of that file name


def module_of(nodeid: str) -> str:
    return nodeid.split("::")[0]


def module_groups(items: list[pytest.Item]) -> dict[str, str]:
    """module -> group: a shared fixture's group when any of its tests uses one, else a shared mark's
    group when any of its tests has one, else the module itself."""
    by_fixture: dict[str, str] = {}
    by_mark: dict[str, str] = {}
    modules: dict[str, None] = {}  # in collection order
    for item in items:
        module = module_of(item.nodeid)
        modules.setdefault(module)
        names = getattr(item, "fixturenames", ())
        for fixture, group in SHARED_FIXTURES.items():
            if fixture in names:
                by_fixture.setdefault(module, group)
        marks = {mark.name for mark in item.iter_markers()}
        for mark, group in SHARED_MARKS.items():
            if mark in marks:
                by_mark.setdefault(module, group)
    return {m: by_fixture.get(m) or by_mark.get(m) or m for m in modules}


def rank(group: str) -> int:
    for position, prefix in enumerate(GROUP_ORDER):
        if group == prefix or group.startswith(prefix + "/"):
            return position
    return len(GROUP_ORDER)


class SuiteGroups(LoadScopeScheduling):
    """xdist's scope scheduling with our groups as the scopes, handed out in the order the workers
    collected them (sorted by ``rank``)."""

    def __init__(self, config: pytest.Config, log: Any = None) -> None:
        config.option.loadscopereorder = False  # keep our order, not "most tests first"
        super().__init__(config, log)
        self.groups_file = Path(config.stash[_FILE_KEY])
        self._groups: dict[str, str] | None = None

    def _split_scope(self, nodeid: str) -> str:
        if self._groups is None:  # called once every worker has collected, so the file is there
            self._groups = json.loads(self.groups_file.read_text())
        module = module_of(nodeid)
        return self._groups.get(module, module)


def make_scheduler(config: pytest.Config, log: Any) -> SuiteGroups | None:
    return SuiteGroups(config, log) if config.getvalue("dist") == "loadgroup" else None


def configure_node(node: Any) -> None:
    """Controller side: name the file the worker writes its group table to."""
    config = node.config
    if _FILE_KEY not in config.stash:
        handle, path = tempfile.mkstemp(prefix="hybridmq-test-groups-", suffix=".json")
        os.close(handle)
        config.stash[_FILE_KEY] = path
        config.add_cleanup(lambda: Path(path).unlink(missing_ok=True))
    node.workerinput[_GROUPS_FILE] = config.stash[_FILE_KEY]


def order_and_publish(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Sort the items into the order groups go out (stable: file order within a rank), in one process
    too, so that a shared fixture's users run one after the other; on a worker, write the group table
    for the controller."""
    groups = module_groups(items)
    config.stash[_GROUPS] = groups
    items.sort(key=lambda item: rank(groups[module_of(item.nodeid)]))
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None or _GROUPS_FILE not in workerinput:
        return
    target = Path(workerinput[_GROUPS_FILE])
    staged = target.with_name(f"{target.name}.{workerinput.get('workerid', 'w')}")
    staged.write_text(json.dumps(groups))
    staged.replace(target)  # every worker collects the same tests: any one's table will do


_GROUPS = pytest.StashKey[dict[str, str]]()  # module -> group, of the tests collected here
_LAST = pytest.StashKey[dict[str, int]]()  # group -> index of its last test in session.items


def last_of_group(item: pytest.Item, nextitem: pytest.Item | None, fixture: str) -> bool:
    """Whether ``item`` is the last test here of the group that shares ``fixture`` (after it, the
    fixture has no more users in this process). On a worker a group arrives whole and runs without a
    break, so it is when the next test is of another group; in one process every collected test
    runs, in ``session.items`` order, so it is when no later one is of that group."""
    groups = item.config.stash.get(_GROUPS, {})
    group = SHARED_FIXTURES[fixture]
    if groups.get(module_of(item.nodeid)) != group:
        return False
    if nextitem is not None and groups.get(module_of(nextitem.nodeid)) == group:
        return False
    if hasattr(item.config, "workerinput"):
        return True
    last = item.config.stash.setdefault(_LAST, {})
    if group not in last:
        items = item.session.items
        last[group] = max(i for i, it in enumerate(items) if groups.get(module_of(it.nodeid)) == group)
    return item.session.items[last[group]] is item
