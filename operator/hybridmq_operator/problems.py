"""What keeps brokers from running, read from the watched pods and MM Leases (pure).

* Broker pods whose container waits for a reason that will not fix itself soon (an image that
  cannot be pulled, a bad container config, a crash loop): the BrokerCluster's ``Ready`` condition
  names the pod and the reason instead of only "not all replicas ready".
* MM Leases carrying ``hybridmq.io/report-oversize``: the MM's report no longer fits the API's
  annotation limit, so the operator's figures for its partitions are stale (``Degraded`` says so).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from hybridmq.api.lease_report import REPORT_OVERSIZE_ANNOTATION

Body = Mapping[str, Any]

# Container waiting reasons worth a user's attention (kubelet's names).
STUCK_REASONS = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "CreateContainerConfigError",
        "CreateContainerError",
        "CrashLoopBackOff",
    }
)


def pod_problems(pods: Iterable[Body]) -> tuple[tuple[str, str, str], ...]:
    """(pod, reason, message) of every broker pod whose container is stuck, by pod name."""
    out: list[tuple[str, str, str]] = []
    for pod in pods:
        name = str((pod.get("metadata") or {}).get("name") or "")
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            waiting = (cs.get("state") or {}).get("waiting") or {}
            reason = str(waiting.get("reason") or "")
            if reason in STUCK_REASONS:
                out.append((name, reason, str(waiting.get("message") or "").strip()[:300]))
                break
    return tuple(sorted(out))


def oversize_reports(leases: Iterable[Body]) -> tuple[tuple[str, int], ...]:
    """(MM, report bytes) of every MM that renews its Lease without its (too large) report."""
    out: list[tuple[str, int]] = []
    for lease in leases:
        meta = lease.get("metadata") or {}
        size = (meta.get("annotations") or {}).get(REPORT_OVERSIZE_ANNOTATION)
        if size:
            try:
                out.append((str(meta.get("name")), int(size)))
            except ValueError:
                continue
    return tuple(sorted(out))
