"""The broker side of the operator's seams: the Lease renewer and the Kubernetes assignment source."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from hybridmq.api.assignment import BrokerRole, PartitionState
from hybridmq.api.lease_report import MMReport, PartitionReport
from hybridmq.broker.kube_source import CLUSTERS, PARTITIONS, KubeAssignmentSource
from hybridmq.broker.lease import LeaseRenewer, renewer_from_env


class FakeLeaseApi:
    def __init__(self) -> None:
        self.leases: dict[str, dict[str, Any]] = {}
        self.fail = False
        self.calls: list[str] = []

    def patch_namespaced_lease(self, name: str, ns: str, body: dict[str, Any], **_: Any) -> None:
        from kubernetes.client.exceptions import ApiException

        self.calls.append("patch")
        if self.fail:
            raise ApiException(status=500)
        if name not in self.leases:
            raise ApiException(status=404)
        self.leases[name]["spec"].update(body["spec"])
        # A merge patch: annotations it does not name stay.
        self.leases[name]["metadata"]["annotations"].update(body["metadata"]["annotations"])

    def create_namespaced_lease(self, ns: str, body: dict[str, Any], **_: Any) -> None:
        self.calls.append("create")
        self.leases[body["metadata"]["name"]] = body


async def test_lease_renewer_creates_renews_reports_and_signals_loss() -> None:
    api = FakeLeaseApi()
    events: list[str] = []
    report = MMReport(partitions={"p0": PartitionReport(role="primary", epoch=3, log_end_offset=10)})
    renewer = LeaseRenewer(
        "demo-mm-0",
        "ns",
        duration_s=1.0,
        renew_interval_s=0.05,
        cluster="demo",
        pod_uid="uid-9",
        report=lambda: report.model_dump(mode="json"),
        on_lost=lambda: events.append("lost"),
        on_renewed=lambda: events.append("renewed"),
        api=api,
    )
    await renewer.start()
    for _ in range(100):
        await asyncio.sleep(0.05)
        if renewer.renewals >= 2:
            break
    assert renewer.valid and events == ["renewed"]
    lease = api.leases["demo-mm-0"]
    assert api.calls[:2] == ["patch", "create"]
    assert lease["spec"]["holderIdentity"] == "demo-mm-0" and lease["spec"]["leaseDurationSeconds"] == 1
    assert lease["metadata"]["labels"] == {"hybridmq.io/role": "mm", "hybridmq.io/cluster": "demo"}
    assert lease["metadata"]["ownerReferences"][0]["uid"] == "uid-9"
    parsed = MMReport.from_annotation(lease["metadata"]["annotations"]["hybridmq.io/report"])
    assert parsed == report
    assert renewer.renewals >= 2
    api.fail = True
    await asyncio.sleep(1.3)
    assert not renewer.valid and events == ["renewed", "lost"]
    api.fail = False
    for _ in range(100):
        await asyncio.sleep(0.05)
        if renewer.valid:
            break
    assert renewer.valid and events == ["renewed", "lost", "renewed"]
    await renewer.stop()


def test_renewer_from_env() -> None:
    assert renewer_from_env(environ={}) is None
    env = {
        "HYBRIDMQ_POD_NAME": "demo-mm-1",
        "HYBRIDMQ_NAMESPACE": "ns",
        "HYBRIDMQ_CLUSTER": "demo",
        "KUBERNETES_SERVICE_HOST": "10.96.0.1",
        "HYBRIDMQ_LEASE_DURATION_SECONDS": "2",
        "HYBRIDMQ_LEASE_RENEW_MILLISECONDS": "500",
    }
    r = renewer_from_env(environ=env)
    assert r is not None and (r.name, r.namespace, r.duration_s, r.renew_interval_s) == (
        "demo-mm-1",
        "ns",
        2.0,
        0.5,
    )


def partition(name: str, cluster: str = "demo", **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "hybridmq.io/v1alpha1",
        "kind": "Partition",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"cluster": cluster, "type": "fixed", "replicas": 2},
        "status": {
            "state": "Active",
            "epoch": 2,
            "primary": "demo-mm-0",
            "replicas": ["demo-mm-0", "demo-mm-1"],
            "inSync": ["demo-mm-0", "demo-mm-1"],
            **status,
        },
    }


def test_kube_source_follows_partitions_and_the_broker_table() -> None:
    src = KubeAssignmentSource("demo", "ns", api_client=object())
    changes: list[int] = []
    src.subscribe(lambda: changes.append(1))
    cluster = {
        "apiVersion": "hybridmq.io/v1alpha1",
        "kind": "BrokerCluster",
        "metadata": {"name": "demo", "namespace": "ns"},
        "spec": {"partitions": {"fixed": {"minInSync": 1}}},
        "status": {
            "brokers": [{"name": "demo-cm-0", "role": "cm", "address": "127.0.2.1:7400", "ready": True}]
        },
    }
    src.apply_listing(CLUSTERS, [cluster])
    src.apply_listing(PARTITIONS, [partition("demo-fixed-0"), partition("other-fixed-0", cluster="other")])
    assert set(src.partitions()) == {"demo-fixed-0"}
    a = src.partitions()["demo-fixed-0"]
    assert (a.epoch, a.primary, a.replicas, a.min_in_sync, a.state) == (
        2,
        "demo-mm-0",
        ("demo-mm-0", "demo-mm-1"),
        1,
        PartitionState.ACTIVE,
    )
    assert src.brokers()["demo-cm-0"].role == BrokerRole.CM
    n = len(changes)
    src.apply_event(PARTITIONS, "MODIFIED", partition("demo-fixed-0", epoch=3, primary="demo-mm-1"))
    assert src.primary_of("demo-fixed-0") == "demo-mm-1" and len(changes) == n + 1
    src.apply_event(PARTITIONS, "MODIFIED", partition("demo-fixed-0", epoch=3, primary="demo-mm-1"))
    assert len(changes) == n + 1  # no change, no notification
    deleting = partition("demo-fixed-0", epoch=3, primary="demo-mm-1")
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    src.apply_event(PARTITIONS, "MODIFIED", deleting)
    assert src.partitions() == {}
    src.apply_event(PARTITIONS, "DELETED", deleting)
    assert json.loads(json.dumps(list(src.brokers()))) == ["demo-cm-0"]


@pytest.mark.parametrize("bad", [{"spec": {"type": "weird", "cluster": "demo"}}, {"spec": {}}])
def test_kube_source_ignores_malformed_partitions(bad: dict[str, Any]) -> None:
    src = KubeAssignmentSource("demo", "ns", api_client=object())
    src.apply_listing(PARTITIONS, [{"metadata": {"name": "x"}, **bad}])
    assert src.partitions() == {}


class MergingLeaseApi(FakeLeaseApi):
    """Merges annotations like a strategic merge patch (None removes one) and refuses, like the API
    server, an object whose annotations exceed 256 KiB."""

    def patch_namespaced_lease(self, name: str, ns: str, body: dict[str, Any], **_: Any) -> None:
        from kubernetes.client.exceptions import ApiException

        self.calls.append("patch")
        if name not in self.leases:
            raise ApiException(status=404)
        merged = dict(self.leases[name]["metadata"].get("annotations") or {})
        for key, value in body["metadata"]["annotations"].items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = value
        if sum(len(k) + len(v) for k, v in merged.items()) > 256 * 1024:
            raise ApiException(
                status=422, reason="metadata.annotations: Too long: must have at most 262144 bytes"
            )
        self.leases[name]["spec"].update(body["spec"])
        self.leases[name]["metadata"]["annotations"] = merged


async def test_an_oversize_report_never_costs_the_lease() -> None:
    api = MergingLeaseApi()
    size = {"n": 10}

    def report() -> dict[str, Any]:
        parts = {
            f"demo-fixed-{i}": PartitionReport(epoch=1, log_end_offset=123456789) for i in range(size["n"])
        }
        return MMReport(partitions=parts).compact()

    renewer = LeaseRenewer("demo-mm-0", "ns", duration_s=5.0, renew_interval_s=0.05, report=report, api=api)

    async def renewals(n: int) -> None:
        target = renewer.renewals + n
        for _ in range(100):
            await asyncio.sleep(0.05)
            if renewer.renewals >= target:
                return
        raise AssertionError("the lease was not renewed")

    await renewer.start()
    await renewals(2)
    small = api.leases["demo-mm-0"]["metadata"]["annotations"]["hybridmq.io/report"]
    size["n"] = 8000  # far past the API's annotation limit
    await renewals(3)
    annotations = api.leases["demo-mm-0"]["metadata"]["annotations"]
    assert renewer.valid and int(annotations["hybridmq.io/report-oversize"]) > 256 * 1024
    assert annotations["hybridmq.io/report"] == small  # the last report that fitted stays
    size["n"] = 20
    await renewals(2)
    annotations = api.leases["demo-mm-0"]["metadata"]["annotations"]
    assert "hybridmq.io/report-oversize" not in annotations
    assert len(MMReport.from_annotation(annotations["hybridmq.io/report"]).partitions) == 20  # type: ignore[union-attr]
    await renewer.stop()
