"""What keeps brokers from running, read from pod and Lease bodies."""

from __future__ import annotations

from typing import Any

from hybridmq_operator import problems


def pod(name: str, waiting: dict[str, Any] | None = None, running: bool = False) -> dict[str, Any]:
    state: dict[str, Any] = {"waiting": waiting} if waiting else ({"running": {}} if running else {})
    return {"metadata": {"name": name}, "status": {"containerStatuses": [{"name": "broker", "state": state}]}}


def test_stuck_pods_are_listed_with_their_reason_and_message() -> None:
    pods = [
        pod("c-mm-1", {"reason": "ImagePullBackOff", "message": "back-off pulling nope:1"}),
        pod("c-mm-0", {"reason": "ErrImagePull", "message": "nope:1 not found"}),
        pod("c-mm-2", {"reason": "ContainerCreating"}),
        pod("c-cm-0", running=True),
        {"metadata": {"name": "c-cm-1"}},
    ]
    assert problems.pod_problems(pods) == (
        ("c-mm-0", "ErrImagePull", "nope:1 not found"),
        ("c-mm-1", "ImagePullBackOff", "back-off pulling nope:1"),
    )


def test_oversize_reports_come_from_the_lease_annotation() -> None:
    leases = [
        {"metadata": {"name": "c-mm-0", "annotations": {"hybridmq.io/report-oversize": "300000"}}},
        {"metadata": {"name": "c-mm-1", "annotations": {"hybridmq.io/report": "{}"}}},
        {"metadata": {"name": "c-mm-2", "annotations": {"hybridmq.io/report-oversize": "junk"}}},
    ]
    assert problems.oversize_reports(leases) == (("c-mm-0", 300000),)
