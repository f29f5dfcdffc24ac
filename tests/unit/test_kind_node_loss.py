"""The kind demo's node-loss choices (hack/kind/node_loss.py), without a cluster."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

SCRIPT = Path(__file__).resolve().parents[2] / "hack" / "kind" / "node_loss.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("kind_node_loss", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


node_loss = _load()
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def part(
    name: str, ptype: str, primary: str, in_sync: list[str] | None = None, **status: Any
) -> dict[str, Any]:
    replicas = [primary, *(r for r in (in_sync or []) if r != primary)]
    st = {"state": "Active", "primary": primary, "replicas": replicas, "inSync": replicas, "epoch": 1}
    st["reportedEpoch"] = 1
    st.update(status)
    return {"metadata": {"name": name}, "spec": {"type": ptype, "replicas": len(replicas)}, "status": st}


def mm(name: str, ready: bool = True) -> dict[str, Any]:
    cond = {"type": "Ready", "status": "True" if ready else "False"}
    return {"metadata": {"name": name}, "status": {"conditions": [cond]}}


CLUSTER = {"spec": {"messageManagers": {"replicas": 3}}}


def test_settled_needs_ready_mms_replicas_in_sync_reports_and_balance() -> None:
    mms = [mm("m0"), mm("m1"), mm("m2")]
    fixed = [
        part("f0", "fixed", "m0", ["m1"]),
        part("f1", "fixed", "m1", ["m2"]),
        part("f2", "fixed", "m2", ["m0"]),
    ]
    assert node_loss.unsettled(CLUSTER, fixed, mms) == ""
    assert "2 of 3 MMs Ready" in node_loss.unsettled(CLUSTER, fixed, [*mms[:2], mm("m2", ready=False)])
    behind = [fixed[0], fixed[1], part("f2", "fixed", "m2", ["m0"], inSync=["m2"])]
    assert "in sync" in node_loss.unsettled(CLUSTER, behind, mms)
    unreported = [fixed[0], fixed[1], part("f2", "fixed", "m2", ["m0"], reportedEpoch=0)]
    assert "reported 0" in node_loss.unsettled(CLUSTER, unreported, mms)
    piled = [
        part("f0", "fixed", "m0", ["m1"]),
        part("f1", "fixed", "m0", ["m2"]),
        part("f2", "fixed", "m2", ["m0"]),
    ]
    assert "not balanced" in node_loss.unsettled(CLUSTER, piled, mms)


def test_the_node_with_most_fixed_primaries_ties_to_the_leading_operator() -> None:
    node_of = {"m0": "w1", "m1": "w2", "m2": "w3"}
    parts = [
        part("f0", "fixed", "m0"),
        part("f1", "fixed", "m1"),
        part("f2", "fixed", "m1"),
        part("o0", "on-demand", "m0"),
        part("o2", "on-demand", "m2"),
    ]
    counts = node_loss.primaries_by_node(parts, node_of)
    assert counts == {"w1": (1, 2), "w2": (2, 2), "w3": (0, 1)}
    assert node_loss.choose_node(counts, operator_node="w1") == "w2"  # most fixed primaries first
    tied = {"w1": (1, 1), "w2": (1, 2), "w3": (1, 1)}
    assert node_loss.choose_node(tied, operator_node="w3") == "w3"
    assert node_loss.choose_node(tied, operator_node=None) == "w2"  # then most primaries


def test_leading_operator_is_the_live_record_with_the_highest_priority() -> None:
    def record(priority: int, seen_ago: float) -> dict[str, Any]:
        return {
            "priority": priority,
            "lifetime": 15,
            "lastseen": (NOW - timedelta(seconds=seen_ago)).isoformat(),
        }

    peering = {"status": {"a": record(10, 1), "b": record(20, 2), "dead": record(99, 60)}}
    assert node_loss.leading_operator(peering, NOW) == "b"
    assert node_loss.leading_operator({"status": {}}, NOW) is None


def test_first_ack_after_the_stop() -> None:
    log = ["acked 1 1000", "acked 2 1990", "noise", "acked 3 2500", "sent 3"]
    assert node_loss.first_acks(log, 2000) == 2500
    assert node_loss.first_acks(log, 3000) is None


def test_the_send_the_failover_held_is_the_longest_wait_in_flight_during_the_failover() -> None:
    log = [
        "acked 1 1000 900.0",  # before the deletion: not counted, however long it waited
        "acked 2 2010 4.0",  # in flight at the deletion, acknowledged by the old primary at once
        "acked 3 2900 850.5",  # held by the failover: begun at 2049.5
        "acked 4 2905 3.0",
        "pid-7,4",
        "acked 5 9000 20.0",
        # A stall of the loaded machine long after the new primary was named: begun at 25000, after
        # the window, so not the failover's however long it waited (the demo once reported 25.4 s).
        "acked 6 25900 900.0",
    ]
    assert node_loss.longest_stall(log, 2000, 3_000) == (2900, 850.5)
    # A send in flight across the deletion counts: begun before it, acknowledged after.
    assert node_loss.longest_stall(["acked 1 2600 1000.0", "acked 2 2700 50.0"], 2000, 3_000) == (
        2600,
        1000.0,
    )
    # Only sends begun after the window: none is the failover's.
    assert node_loss.longest_stall(log[5:], 2000, 3_000) is None
    assert node_loss.longest_stall(log, 50_000, 3_000) is None


def test_stall_command_prints_the_demo_figure(tmp_path: Path) -> None:
    """What the demo runs: ``node_loss.py stall --since-ms T --sent-within-s S LOG`` in the host's
    python3."""
    log = tmp_path / "fixed"
    log.write_text("acked 1 1000 5.0\nacked 2 2600 700.0\nacked 3 2610 2.0\nacked 4 9000 900.0\nsent 3\n")
    done = subprocess.run(
        ["python3", str(SCRIPT), "stall", "--since-ms", "2000", "--sent-within-s", "2.5", str(log)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["producer_longest_wait_ms=700.0", "producers_resumed_s=0.600"]
    empty = subprocess.run(
        ["python3", str(SCRIPT), "stall", "--since-ms", "9500", "--sent-within-s", "2.5", str(log)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (empty.returncode, empty.stdout.strip()) == (1, "producers_resumed_s=none")
