"""Real CM and MM processes on loopback for the broker tests (``LocalCluster``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from hybridmq.local.runner import LocalCluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """1 CM + 2 MMs (2 fixed + 2 on-demand partitions each), shared by a test module."""
    c = LocalCluster(tmp_path_factory.mktemp("cluster"), mms=2, mm_args=["--max-redeliveries", "2"])
    with c:
        yield c


@pytest.fixture(scope="module")
def secure_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A cluster with a credentials file and ACLs: alice may produce/consume orders.*, bob only consume
    (orders.* and his own ``queue:bob.*``)."""
    d = tmp_path_factory.mktemp("secure")
    creds = d / "users"
    creds.mkdir()
    (creds / "alice").write_text("alice-secret\n")
    (creds / "bob").write_text("bob-secret\n")
    acl = d / "acl.json"
    acl.write_text(
        json.dumps(
            {
                "alice": {"produce": ["topic:orders.*", "queue:*"], "consume": ["topic:orders.*", "queue:*"]},
                "bob": {"produce": [], "consume": ["topic:orders.*", "queue:bob.*"]},
            }
        )
    )
    c = LocalCluster(d / "run", mms=1, credentials=creds, acl=acl)
    with c:
        yield c


def _controlled(tmp_path: Path, mms: int, fixed: int, on_demand_per_mm: int) -> Iterator[LocalCluster]:
    """A cluster run by the local controller, each partition on 2 MMs, for one test."""
    with LocalCluster(tmp_path, mms=mms, replicas=2, fixed=fixed, on_demand_per_mm=on_demand_per_mm) as c:
        yield c


@pytest.fixture
def replicated(tmp_path: Path) -> Iterator[LocalCluster]:
    """3 MMs, one fixed partition (``local-fixed-0``) with 2 replicas."""
    yield from _controlled(tmp_path, mms=3, fixed=1, on_demand_per_mm=0)


@pytest.fixture
def two_fixed(tmp_path: Path) -> Iterator[LocalCluster]:
    """2 MMs, two fixed partitions with 2 replicas each."""
    yield from _controlled(tmp_path, mms=2, fixed=2, on_demand_per_mm=0)


@pytest.fixture
def on_demand(tmp_path: Path) -> Iterator[LocalCluster]:
    """3 MMs, one on-demand partition on each, with 2 replicas."""
    yield from _controlled(tmp_path, mms=3, fixed=0, on_demand_per_mm=1)


@pytest.fixture
def retention_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    """1 CM + 1 MM with one fixed partition (``fixed-0-0``), 64 KiB segments and log retention
    every 0.3 s, for one test."""
    c = LocalCluster(
        tmp_path,
        mms=1,
        fixed_per_mm=1,
        on_demand_per_mm=0,
        mm_args=["--segment-bytes", "65536", "--retention-interval", "0.3"],
    )
    with c:
        yield c


def read_log(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""
