"""The broker-only controller's liveness rules and planning, without processes or HTTP."""

from __future__ import annotations

import time
from typing import Any

from hybridmq.api.assignment import BrokerEntry, BrokerRole
from hybridmq.api.lease_report import MMReport, PartitionReport
from hybridmq.local.controller import LocalController, cluster_spec

MMS = ["mm-0", "mm-1", "mm-2"]


def _controller() -> LocalController:
    brokers = [BrokerEntry(name=m, role=BrokerRole.MM, address="127.0.0.1:1") for m in MMS]
    return LocalController(
        MMS,
        brokers,
        spec=cluster_spec(fixed=2, replicas=2, on_demand_per_mm=0),
        startup_grace_s=0,
        secret="a-test-cluster-secret",
    )


def _beat_all(c: LocalController, incarnation: str = "a") -> None:
    for m in MMS:
        reports = {}
        for a in c.assignments:
            if m in a.replicas:
                role = "primary" if a.primary == m else "backup"
                reports[a.name] = PartitionReport(
                    role=role,
                    epoch=a.epoch,
                    log_end_offset=10,
                    in_sync=list(a.in_sync) if role == "primary" else [],
                )
        c.heartbeat(m, incarnation, MMReport(partitions=reports))


def test_lapsed_heartbeat_fails_the_primary_over_at_the_next_epoch() -> None:
    c = _controller()
    _beat_all(c)
    c.tick()
    before = {a.name: a for a in c.assignments}
    victim = before["local-fixed-0"].primary
    assert victim is not None
    c.last_seen[victim] -= 5.0  # its lease (1 s) lapsed
    version = c.version
    c.tick()
    after = {a.name: a for a in c.assignments}["local-fixed-0"]
    assert c.version > version
    assert after.epoch == before["local-fixed-0"].epoch + 1
    assert after.primary in before["local-fixed-0"].in_sync and after.primary != victim
    assert victim not in after.replicas and victim not in c.live


def test_a_restarted_process_is_a_loss_even_within_the_lease() -> None:
    c = _controller()
    _beat_all(c)
    c.tick()
    victim = {a.name: a for a in c.assignments}["local-fixed-0"].primary
    assert victim is not None
    c.heartbeat(victim, "b", None)  # a new incarnation behind the same name
    c.tick()
    after = {a.name: a for a in c.assignments}["local-fixed-0"]
    assert after.primary != victim and after.epoch == 1
    c.tick()
    assert victim in c.live  # and it is back (as a backup, nothing moved back)
    assert {a.name: a for a in c.assignments}["local-fixed-0"].primary != victim


def test_a_proposed_in_sync_set_is_committed() -> None:
    c = _controller()
    _beat_all(c)
    c.tick()
    a = {x.name: x for x in c.assignments}["local-fixed-0"]
    assert a.primary is not None
    backup = a.backups[0]
    report = MMReport(
        partitions={
            a.name: PartitionReport(role="primary", epoch=a.epoch, log_end_offset=10, in_sync=[a.primary])
        }
    )
    c.heartbeat(a.primary, "a", report)
    c.tick()
    assert {x.name: x for x in c.assignments}[a.name].in_sync == (a.primary,)
    assert backup in {x.name: x for x in c.assignments}[a.name].replicas


def test_the_http_api_refuses_requests_without_the_cluster_secret() -> None:
    import urllib.error
    import urllib.request

    killed: list[str] = []

    class Processes:
        def processes(self) -> dict[str, str]:
            return dict.fromkeys(MMS, "running")

        def signal_broker(self, name: str, sig: str) -> None:
            killed.append(name)

        def start_broker(self, name: str) -> None:
            raise AssertionError("not asked")

    brokers = [BrokerEntry(name=m, role=BrokerRole.MM, address="127.0.0.1:1") for m in MMS]
    c = LocalController(MMS, brokers, processes=Processes(), secret="the-right-cluster-secret").start()
    try:

        def status(path: str, method: str = "GET", token: str | None = None) -> int:
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            req = urllib.request.Request(c.url + path, method=method, headers=headers)
            try:
                with urllib.request.urlopen(req, timeout=10) as resp:
                    return int(resp.status)
            except urllib.error.HTTPError as err:
                return int(err.code)

        for token in (None, "a-wrong-cluster-secret!!"):
            assert status("/state", token=token) == 401
            assert status("/assignments", token=token) == 401
            assert status("/kill/mm-1?signal=KILL", "POST", token) == 401
        assert killed == []
        assert status("/state", token="the-right-cluster-secret") == 200
        assert status("/kill/mm-1?signal=KILL", "POST", "the-right-cluster-secret") == 200
        assert killed == ["mm-1"]
    finally:
        c.stop()


def test_a_stalled_controller_holds_none_of_its_stall_against_the_mms(monkeypatch: Any) -> None:
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    c = _controller()
    _beat_all(c)
    c.tick()
    clock[0] += 3.0  # the controller's process was starved for 3 s: heartbeats wait unread
    c.tick()
    assert c.live == frozenset(MMS), "MMs declared lost for the controller's own stall"
    for m in MMS[:2]:  # the waiting heartbeats are read; mm-2 really died meanwhile
        c.heartbeat(m, "a", None)
    for _ in range(30):  # 1.5 s of a controller that runs normally
        clock[0] += 0.05
        c.heartbeat(MMS[0], "a", None)
        c.heartbeat(MMS[1], "a", None)
        c.tick()
    assert c.live == frozenset(MMS[:2]), "a dead MM must still be found out"


def test_a_report_that_disagrees_with_the_table_is_planned_once_not_every_tick(monkeypatch: Any) -> None:
    """Right after a failover a new primary still names the lost MM in sync: the table cannot
    follow (the MM is no replica any more). One plan takes the report in; planning all partitions
    again on every 50 ms tick until the next report would take the CPU the brokers need."""
    c = _controller()
    _beat_all(c)
    c.tick()
    a = {x.name: x for x in c.assignments}["local-fixed-0"]
    assert a.primary is not None
    lost = "mm-9"  # not a replica: the planner keeps it out of the table
    report = MMReport(
        partitions={
            a.name: PartitionReport(
                role="primary", epoch=a.epoch, log_end_offset=10, in_sync=[a.primary, *a.backups, lost]
            )
        }
    )
    plans = 0
    replan = c.replan

    def counted(now: float | None = None) -> None:
        nonlocal plans
        plans += 1
        replan(now)

    monkeypatch.setattr(c, "replan", counted)
    c.heartbeat(a.primary, "a", report)
    for _ in range(5):
        c.tick()
    assert plans == 1, f"{plans} plans for one report"
    assert lost not in {x.name: x for x in c.assignments}[a.name].in_sync


def test_moving_offsets_alone_wait_for_the_full_plan(monkeypatch: Any) -> None:
    """Every produce moves a primary's offsets, so every heartbeat under load carries a changed
    report. Planning every partition for each would keep a core busy at a thousand partitions;
    offsets change no decision and are taken in by the periodic plan. An in-sync change is
    planned at once."""
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    c = _controller()
    _beat_all(c)
    c.tick()
    plans: list[float] = []
    replan = c.replan

    def counted(now: float | None = None) -> None:
        plans.append(clock[0])
        replan(now)

    monkeypatch.setattr(c, "replan", counted)
    a = {x.name: x for x in c.assignments}["local-fixed-0"]
    assert a.primary is not None and a.backups
    for step in range(1, 20):  # 0.95 s of heartbeats whose offsets move at every beat
        clock[0] += 0.05
        offsets = {x.name: x for x in c.assignments}
        reports = {
            name: PartitionReport(
                role="primary", epoch=x.epoch, log_end_offset=10 + step, in_sync=list(x.in_sync)
            )
            for name, x in offsets.items()
            if x.primary == a.primary
        }
        c.heartbeat(a.primary, "a", MMReport(partitions=reports))
        for other in MMS:
            if other != a.primary:
                c.heartbeat(other, "a", None)  # alive, report unchanged
        c.tick()
    assert plans == [], f"offsets alone planned {len(plans)} times within a second"
    clock[0] += 0.1
    c.tick()
    assert len(plans) == 1, "the periodic plan must take the moved offsets in"
    shrunk = PartitionReport(role="primary", epoch=a.epoch, log_end_offset=30, in_sync=[a.primary])
    clock[0] += 0.05
    c.heartbeat(a.primary, "a", MMReport(partitions={a.name: shrunk}))
    c.tick()
    assert c.live == frozenset(MMS)
    assert len(plans) == 2, "an in-sync change must be planned at once"
    assert {x.name: x for x in c.assignments}[a.name].in_sync == (a.primary,)


def test_heartbeats_are_answered_while_a_plan_runs(monkeypatch: Any) -> None:
    """The controller renews leases as the Kubernetes API server does, whatever the planning is
    doing. A plan of thousands of partitions takes a good part of a second on a busy machine: a
    heartbeat held up meanwhile let the MMs' leases lapse in the middle of a failover."""
    import json
    import threading
    import urllib.request

    import hybridmq.local.controller as controller_module

    plan_assignments = controller_module.plan_assignments
    planning = threading.Event()

    def slow_plan(*args: Any, **kwargs: Any) -> Any:
        planning.set()
        time.sleep(1.5)  # as long as 1,000 partitions under load, and then some
        return plan_assignments(*args, **kwargs)

    c = _controller()
    c.start()
    try:
        monkeypatch.setattr(controller_module, "plan_assignments", slow_plan)
        secret = "a-test-cluster-secret"

        def beat(name: str) -> float:
            body = json.dumps({"name": name, "incarnation": "a", "report": None}).encode()
            req = urllib.request.Request(
                c.url + "/heartbeat",
                data=body,
                method="POST",
                headers={"Authorization": f"Bearer {secret}", "Content-Type": "application/json"},
            )
            started = time.monotonic()
            with urllib.request.urlopen(req, timeout=10) as resp:
                assert resp.status == 200
            return time.monotonic() - started

        for m in MMS:
            beat(m)
        c.call(lambda: c.last_seen.update({"mm-2": time.monotonic() - 5}))  # lost: a failover plan
        assert planning.wait(5), "no plan started"
        answered = [beat("mm-0") for _ in range(3)]
        assert max(answered) < 0.5, f"heartbeats waited for the plan: {answered}"
        deadline = time.monotonic() + 10
        while any(a.primary == "mm-2" for a in c.call(lambda: c.assignments)):
            assert time.monotonic() < deadline, "the lost MM still leads: the plan never finished"
            time.sleep(0.05)
    finally:
        c.stop()


def test_an_exited_process_is_a_loss_at_once_and_only_its_own_exit_counts() -> None:
    c = _controller()
    c.lease_s = 60.0  # the lease cannot be what decides here
    c.process_started("mm-0", 100)
    c.process_started("mm-1", 101)
    _beat_all(c)
    c.tick()
    victim = {a.name: a for a in c.assignments}["local-fixed-0"].primary
    assert victim is not None
    c.process_exited(victim, 999)  # some other process's exit: nothing happens
    c.process_started(victim, 200)  # (as if restarted) ...
    c.process_exited(victim, 100 if victim == "mm-0" else 101)  # ... an older process's exit is stale
    c.tick()
    assert victim in c.live
    c.process_exited(victim, 200)
    c.heartbeat(victim, "a", None)  # a late heartbeat of the dead incarnation does not revive it
    c.tick()
    after = {a.name: a for a in c.assignments}["local-fixed-0"]
    assert victim not in c.live and after.primary != victim and after.epoch == 1
    assert any(e["message"] == f"{victim}: process exited" for e in c.events)
    c.heartbeat(victim, "b", None)  # its new process joins
    c.tick()
    c.tick()
    assert victim in c.live


def test_the_exit_of_a_real_process_is_seen_by_the_running_controller() -> None:
    import subprocess
    import sys

    brokers = [BrokerEntry(name=m, role=BrokerRole.MM, address="127.0.0.1:1") for m in MMS]
    c = LocalController(MMS, brokers, lease_s=60.0, startup_grace_s=60.0, secret="a-test-cluster-secret")
    c.start()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        c.process_started("mm-1", child.pid)
        time.sleep(0.3)
        assert "mm-1" in c.snapshot()["live"]
        child.kill()
        deadline = time.monotonic() + 10
        while "mm-1" in c.snapshot()["live"] and time.monotonic() < deadline:
            time.sleep(0.05)
        state = c.snapshot()
        assert "mm-1" not in state["live"] and state["exited"] == ["mm-1"]
        assert {"mm-0", "mm-2"} <= set(state["live"])  # still in their startup grace
    finally:
        child.kill()
        child.wait()
        c.stop()
