"""The kind demo's roll figures (hack/kind/roll.py), from producer logs and resources, without a cluster."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

SCRIPT = Path(__file__).resolve().parents[2] / "hack" / "kind" / "roll.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("kind_roll", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


roll = _load()


def cluster(updated: int, of: int = 3, status: str = "True", reason: str = "Restarting") -> dict[str, Any]:
    return {
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "Rolling", "status": status, "reason": reason},
            ],
            "roll": {"messageManagersUpdated": updated, "messageManagers": of, "pod": "demo-mm-1"},
        }
    }


def pod(ready: bool, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "demo-mm-0"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "status": {"conditions": [{"type": "Ready", "status": str(ready)}]}}


def test_a_send_counts_in_the_phase_it_began_in_not_the_one_it_ended_in() -> None:
    log = [
        "acked 1 1000 5.0",  # began 995: before
        "acked 2 2300 400.0",  # began 1900, before the roll at 2000: a stall before it
        "acked 3 2600 250.0",  # began 2350: the MMs' part
        "acked 4 5200 900.0",  # began 4300, ended in the CMs' part: still the MMs'
        "acked 5 5600 50.0",  # began 5550: the CMs' part
        "acked 6 9100 10.0",  # began 9090, after the roll: nowhere
        "sent 6",
        "acked 7 12",  # an old three-word line (no wait logged) is not a send here
    ]
    sends = roll.sends(log)
    assert sends == [
        (995.0, 5.0),
        (1900.0, 400.0),
        (2350.0, 250.0),
        (4300.0, 900.0),
        (5550.0, 50.0),
        (9090.0, 10.0),
    ]
    figures = roll.phase_figures(sends, start=2000, mms_done=5000, end=9000)
    assert figures["max_stall_ms"] == 900.0 and figures["sends_during"] == 2
    assert figures["p99_ms_before"] == 400.0
    assert figures["max_stall_ms_cms"] == 50.0 and figures["sends_cms"] == 1


def test_stalls_fails_when_no_send_began_during_the_roll(tmp_path: Path, capsys: Any) -> None:
    log = tmp_path / "fixed"
    log.write_text("acked 1 1000 5.0\nacked 2 9500 5.0\n")
    assert (
        roll.main(["stalls", "--start-ms", "2000", "--mms-done-ms", "5000", "--end-ms", "9000", str(log)])
        == 1
    )
    assert "sends_during=0" in capsys.readouterr().out.splitlines()[-1]


def test_the_mms_part_ends_only_when_every_mm_is_updated_and_ready() -> None:
    assert not roll.mms_done(cluster(2), [pod(True)] * 3)
    assert not roll.mms_done(cluster(3), [pod(True), pod(True), pod(False)])
    assert not roll.mms_done(cluster(3), [pod(True), pod(True), pod(True, deleting=True)])
    assert not roll.mms_done(cluster(3), [pod(True)] * 2)
    assert not roll.mms_done({"status": {}}, [])
    assert roll.mms_done(cluster(3), [pod(True)] * 3)


def test_progress_says_where_the_roll_stands() -> None:
    line = roll.progress(cluster(1))
    assert "Rolling=True Restarting" in line and "MMs 1/3" in line and "pod=demo-mm-1" in line
    assert roll.rolling_condition(cluster(3, status="False", reason="Done"))["reason"] == "Done"
    assert roll.rolling_condition({}) == {}
