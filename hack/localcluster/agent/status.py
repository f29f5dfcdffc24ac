"""Pod status from container states: phase and conditions, computed the way the kubelet does."""

from __future__ import annotations

from collections.abc import Sequence

from localcluster.agent.container import now_rfc3339
from localcluster.agent.kube import JSON

OWN_CONDITIONS = ("PodScheduled", "PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready")


def phase(
    statuses: Sequence[JSON], init_statuses: Sequence[JSON], restart_policy: str, init_failed: bool
) -> str:
    """The pod phase (kubelet's getPhase, without the 'unknown' case)."""
    if init_failed:
        return "Failed"
    init_done = all(s["state"].get("terminated", {}).get("exitCode") == 0 for s in init_statuses)
    if not init_done:
        return "Pending"
    running = waiting = stopped = succeeded = 0
    for status in statuses:
        state = status["state"]
        if "running" in state:
            running += 1
        elif "terminated" in state:
            stopped += 1
            if state["terminated"].get("exitCode") == 0:
                succeeded += 1
        elif status.get("lastState", {}).get("terminated"):
            stopped += 1
        else:
            waiting += 1
    if waiting > 0:
        return "Pending"
    if running > 0:
        return "Running"
    if stopped == len(statuses) and stopped > 0:
        if restart_policy == "Always":
            return "Running"
        if restart_policy == "OnFailure":
            return "Succeeded" if succeeded == stopped else "Running"
        return "Succeeded" if succeeded == stopped else "Failed"
    return "Pending"


class Conditions:
    """Pod conditions with stable lastTransitionTime across updates."""

    def __init__(self) -> None:
        self._current: dict[str, JSON] = {}

    def set(self, kind: str, ok: bool, reason: str = "", message: str = "") -> None:
        status = "True" if ok else "False"
        previous = self._current.get(kind)
        condition: JSON = {
            "type": kind,
            "status": status,
            "lastProbeTime": None,
            "lastTransitionTime": (
                previous["lastTransitionTime"] if previous and previous["status"] == status else now_rfc3339()
            ),
        }
        if reason and not ok:
            condition["reason"] = reason
        if message and not ok:
            condition["message"] = message
        self._current[kind] = condition

    def list(self, foreign: Sequence[JSON] = ()) -> list[JSON]:
        """Our conditions in kubelet order, plus conditions owned by others (kept as they are)."""
        ours = [self._current[k] for k in OWN_CONDITIONS if k in self._current]
        return ours + [c for c in foreign if c.get("type") not in OWN_CONDITIONS]
