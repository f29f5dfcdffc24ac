"""The MM of a pod without a cluster (``hybridmq.cli.compose`` + ``hybridmq.broker.kube_wiring``):
lease fencing, the MM report, the data janitor."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from hybridmq.api.assignment import PartitionAssignment, PartitionType
from hybridmq.broker.kube_source import KubeAssignmentSource
from hybridmq.broker.kube_wiring import KubeLease, kube_enabled
from hybridmq.broker.mm.server import MessageManager, MMConfig
from hybridmq.cli.compose import message_manager

ENV = {"HYBRIDMQ_ASSIGNMENT_SOURCE": "kubernetes", "HYBRIDMQ_CLUSTER": "c", "HYBRIDMQ_NAMESPACE": "ns"}


class FakeRenewer:
    def __init__(self) -> None:
        self.valid = True
        self.renewals = 3
        self.calls: list[str] = []

    def remaining_s(self) -> float:
        return 0.5

    async def renew_once(self) -> bool:
        self.calls.append("renew")
        return True

    async def start(self) -> None:
        self.calls.append("start")

    async def stop(self, release: bool = False) -> None:
        self.calls.append(f"stop release={release}")


def _mm(tmp_path: Path) -> tuple[MessageManager, KubeLease, KubeAssignmentSource]:
    mm = message_manager(MMConfig(name="c-mm-0", data_dir=tmp_path), environ=ENV)
    assert isinstance(mm.liveness, KubeLease) and isinstance(mm.source, KubeAssignmentSource)
    return mm, mm.liveness, mm.source


def _held(mm: MessageManager, lease: KubeLease) -> None:
    """What ``MessageManager.start`` does for its lease, without serving."""
    lease.holder = mm


def test_enabled_only_with_the_operator_environment() -> None:
    assert kube_enabled(ENV)
    assert not kube_enabled({"HYBRIDMQ_CLUSTER": "c"})
    assert not kube_enabled({"HYBRIDMQ_ASSIGNMENT_SOURCE": "kubernetes"})


def test_lease_lost_fences_writes_and_a_renewal_lifts_the_fence(tmp_path: Path) -> None:
    mm, lease, source = _mm(tmp_path)
    assert mm.replica_manager.liveness is lease  # the primaries check it before each write
    assert lease.renewer is None and lease.valid()  # outside a pod: no Lease
    lease.fence_writes()
    assert not lease.valid() and lease.remaining_s() == 0.0
    lease.unfence_writes()
    assert lease.valid()

    renewer = FakeRenewer()
    lease = KubeLease(source, renewer)  # type: ignore[arg-type]
    assert lease.valid()
    renewer.valid = False
    assert not lease.valid()


def test_stop_fences_before_releasing_the_lease(tmp_path: Path) -> None:
    mm, _, source = _mm(tmp_path)
    renewer = FakeRenewer()
    lease = KubeLease(source, renewer)  # type: ignore[arg-type]
    seen: list[bool] = []

    async def stop(release: bool = False) -> None:
        seen.append(lease.valid())
        renewer.calls.append(f"stop release={release}")

    renewer.stop = stop  # type: ignore[method-assign]

    async def main() -> None:
        await lease.start(mm)
        lease.trigger()
        await asyncio.sleep(0)
        await lease.stop()

    asyncio.run(main())
    assert renewer.calls[0] == "start" and "renew" in renewer.calls
    assert renewer.calls[-1] == "stop release=True"
    assert seen == [False]


def test_janitor_drops_data_of_partitions_not_held_and_reports_what_is_on_disk(tmp_path: Path) -> None:
    mm, lease, source = _mm(tmp_path)
    _held(mm, lease)
    for name in ("c-fixed-0", "c-fixed-1", "c-od-x-0", "lost+found"):
        (tmp_path / name).mkdir()
    assert lease.drop_unheld() == []  # no listing yet: nothing is known to be unheld
    source._partitions = {
        "c-fixed-0": PartitionAssignment(
            name="c-fixed-0", type=PartitionType.FIXED, primary="c-mm-1", replicas=("c-mm-1", "c-mm-0")
        ),
        "c-fixed-1": PartitionAssignment(
            name="c-fixed-1", type=PartitionType.FIXED, primary="c-mm-1", replicas=("c-mm-1", "c-mm-2")
        ),
    }
    report = lease.report()["partitions"]
    assert set(report) == {"c-fixed-0", "c-fixed-1", "c-od-x-0"}
    for plural in ("partitions", "brokerclusters"):
        source._synced[plural] = asyncio.Event()
        source._synced[plural].set()
    assert lease.drop_unheld() == ["c-fixed-1", "c-od-x-0"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c-fixed-0", "lost+found"]
    assert set(lease.report()["partitions"]) == {"c-fixed-0"}


def test_after_a_lost_lease_writes_resume_only_once_a_fresh_listing_is_applied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    listed: list[str] = []

    class FakeApi:
        def __init__(self, _client: object) -> None:
            pass

        def list_namespaced_custom_object(self, *args: object, **kwargs: object) -> dict[str, object]:
            listed.append(str(args[2]))
            return {"items": []}

    monkeypatch.setattr("kubernetes.client.CustomObjectsApi", FakeApi)
    mm, _, source = _mm(tmp_path)
    lease = KubeLease(source, FakeRenewer())  # type: ignore[arg-type]
    _held(mm, lease)
    monkeypatch.setattr(mm.replica_manager, "changed", lambda: None)  # not started: nothing to reconcile
    source._partitions = {
        "c-fixed-0": PartitionAssignment(name="c-fixed-0", type=PartitionType.FIXED, primary="c-mm-0")
    }

    async def main() -> None:
        lease.on_renewed()  # the first renewal: writable at once
        assert lease.valid()
        lease.on_lost()  # lease lost
        assert not lease.valid()
        lease.on_renewed()  # renewed again: relist first
        assert not lease.valid()
        assert lease._unfencing is not None
        await asyncio.wait_for(lease._unfencing, 5)

    asyncio.run(main())
    assert listed == ["ns"]
    assert lease.valid()
    assert source.partitions() == {}  # the fresh listing replaced the stale table
