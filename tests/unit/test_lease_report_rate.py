"""An MM's Lease renewals carry its report at once when a decision may change, otherwise at most
every ``report_interval_s``: moving offsets alone do not send 100 KB four times a second."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from hybridmq.api.lease_report import MMReport, PartitionReport
from hybridmq.broker.lease import LeaseRenewer


class RecordingLeaseApi:
    """Keeps the Lease and every patch body, like the API server would receive them."""

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.patches: list[dict[str, Any]] = []

    def patch_namespaced_lease(self, name: str, ns: str, body: dict[str, Any], **_: Any) -> None:
        from kubernetes.client.exceptions import ApiException

        if self.lease is None:
            raise ApiException(status=404)
        self.patches.append(body)

    def create_namespaced_lease(self, ns: str, body: dict[str, Any], **_: Any) -> None:
        self.lease = body


def reported(api: RecordingLeaseApi) -> list[MMReport]:
    out = []
    for body in api.patches:
        text = body["metadata"]["annotations"].get("hybridmq.io/report")
        if text is not None:
            parsed = MMReport.from_annotation(text)
            assert parsed is not None
            out.append(parsed)
    return out


async def test_offsets_alone_wait_for_the_interval_a_new_in_sync_set_goes_out_at_once() -> None:
    api = RecordingLeaseApi()
    state: dict[str, Any] = {"leo": 0, "in_sync": ["mm-0", "mm-1"]}

    def report() -> dict[str, Any]:
        state["leo"] += 10  # traffic: the offsets move on every renewal
        part = PartitionReport(role="primary", epoch=1, log_end_offset=state["leo"], in_sync=state["in_sync"])
        return MMReport(partitions={"p0": part}).compact()

    renewer = LeaseRenewer(
        "mm-0", "ns", duration_s=5.0, renew_interval_s=0.02, report=report, api=api, report_interval_s=60.0
    )
    await renewer.start()
    for _ in range(200):
        await asyncio.sleep(0.02)
        if len(api.patches) >= 20:
            break
    # Twenty renewals well within the interval: only the first carried the (moving) report.
    assert len(api.patches) >= 20 and len(reported(api)) == 0 and api.lease is not None
    assert "hybridmq.io/report" in api.lease["metadata"]["annotations"]
    state["in_sync"] = ["mm-0"]  # the backup fell out of sync: the operator must know now
    n = len(api.patches)
    for _ in range(100):
        await asyncio.sleep(0.02)
        if len(api.patches) >= n + 3:
            break
    sent = reported(api)
    assert len(sent) == 1 and sent[0].partitions["p0"].in_sync == ["mm-0"]
    assert renewer.valid
    await renewer.stop()


async def test_the_figures_still_go_out_every_interval() -> None:
    api = RecordingLeaseApi()
    leo = {"n": 0}

    def report() -> dict[str, Any]:
        leo["n"] += 1
        return MMReport(partitions={"p0": PartitionReport(epoch=1, log_end_offset=leo["n"])}).compact()

    renewer = LeaseRenewer(
        "mm-0", "ns", duration_s=5.0, renew_interval_s=0.02, report=report, api=api, report_interval_s=0.2
    )
    started = time.monotonic()
    await renewer.start()
    for _ in range(500):
        await asyncio.sleep(0.02)
        if len(api.patches) >= 40 and time.monotonic() - started > 1.0:
            break
    await renewer.stop()
    elapsed = time.monotonic() - started
    sent = reported(api)
    # About one every 0.2 s (the first went with the create), far fewer than the renewals, and
    # the offsets they carry keep growing.
    assert 2 <= len(sent) <= elapsed / 0.2 + 1 and len(sent) < len(api.patches) / 2
    offsets = [r.partitions["p0"].log_end_offset for r in sent]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)


class SlowLeaseApi(RecordingLeaseApi):
    """An API server that takes ``delay`` seconds to answer every renewal."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay

    def patch_namespaced_lease(self, name: str, ns: str, body: dict[str, Any], **kw: Any) -> None:
        time.sleep(self.delay)
        super().patch_namespaced_lease(name, ns, body, **kw)


async def test_a_slow_api_server_still_renews_a_long_lease() -> None:
    """Renewals every 0.1 s of a 4 s Lease against an API server that answers in 0.8 s: each one
    must be allowed to finish (the lease stays valid), not time out behind the previous one."""
    api = SlowLeaseApi(0.8)
    lost: list[int] = []
    renewer = LeaseRenewer(
        "mm-0", "ns", duration_s=4.0, renew_interval_s=0.1, api=api, on_lost=lambda: lost.append(1)
    )
    await renewer.start()
    await asyncio.sleep(6.0)
    assert renewer.valid and not lost and renewer.renewals >= 4
    await renewer.stop()
