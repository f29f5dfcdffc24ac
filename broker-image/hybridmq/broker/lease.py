"""MM liveness: renew a ``coordination.k8s.io`` Lease named after the pod, in the pod's namespace.

The operator declares an MM lost when its Lease's ``renewTime + leaseDurationSeconds`` has passed
(docs/design.md, detecting MM loss). The MM must therefore stop acknowledging writes *before*
the operator may fail it over: the renewer keeps the deadline ``start of the last successful
renewal + lease duration`` (measured on the MM's monotonic clock, so it is never later than the
operator's view) and calls
``on_lost`` as soon as that deadline passes without a newer successful renewal, ``on_renewed`` when
a renewal succeeds again.

Renewals run as an asyncio task that hands each API call to one dedicated thread: an event loop
that is stuck stops renewing too, which is what we want (an MM that cannot serve must lose its
lease). Renewals also carry the MM's ``report`` (what it holds: per partition its role,
epoch, log end offset, in-sync set, backlog, producers) as the ``hybridmq.io/report`` annotation,
which is how the operator learns in-sync sets, offsets and backlogs without ever letting the MM
write a Partition: at once when what the operator decides from changed (``decision_key``: roles,
epochs, in-sync sets, emptiness, the stop request), otherwise at most every ``report_interval_s``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from kubernetes.client.exceptions import ApiException

from hybridmq.api.lease_report import (
    MAX_REPORT_BYTES,
    REPORT_ANNOTATION,
    REPORT_OVERSIZE_ANNOTATION,
    decision_key,
)

LOG = logging.getLogger(__name__)


LABEL_CLUSTER = "hybridmq.io/cluster"
LABEL_ROLE = "hybridmq.io/role"

Report = Callable[[], Mapping[str, Any]]
Callback = Callable[[], None]


def micro_time(ts: float | None = None) -> str:
    """A Kubernetes MicroTime (RFC 3339 with microseconds, UTC)."""
    moment = datetime.fromtimestamp(time.time() if ts is None else ts, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _default_api() -> Any:
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.CoordinationV1Api()


class LeaseRenewer:
    """Keeps ``Lease/<name>`` alive in ``namespace`` and tells the MM when it may no longer write."""

    def __init__(
        self,
        name: str,
        namespace: str,
        *,
        duration_s: float = 1.0,
        renew_interval_s: float | None = None,
        cluster: str | None = None,
        pod_uid: str | None = None,
        report: Report | None = None,
        on_lost: Callback | None = None,
        on_renewed: Callback | None = None,
        api: Any = None,
        request_timeout_s: float | None = None,
        report_interval_s: float = 2.0,
    ) -> None:
        self.name = name
        self.namespace = namespace
        self.duration_s = max(1.0, float(duration_s))
        self.renew_interval_s = renew_interval_s if renew_interval_s else self.duration_s / 3
        self.cluster = cluster
        self.pod_uid = pod_uid
        self.report = report
        self.on_lost = on_lost
        self.on_renewed = on_renewed
        # A renewal may take up to half the lease: an API server that answers slowly (a loaded
        # control plane) still renews it, instead of every attempt timing out behind the last one.
        self.request_timeout_s = request_timeout_s or max(0.2, self.renew_interval_s * 2, self.duration_s / 2)
        self._api = api
        self._deadline = 0.0  # monotonic; the lease is ours until then
        self._held = False
        self._task: asyncio.Task[None] | None = None
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"lease-{name}")
        self.renewals = 0
        self._oversize = False  # the last report was too big to send
        # A report whose decision key (``decision_key``) did not change goes out at most every
        # ``report_interval_s``; the renewals in between carry only the renew time (a 100 KB
        # report of 1,000 partitions four times a second per MM is what the API server chokes on).
        self.report_interval_s = report_interval_s
        self._sent_key: Any = None
        self._sent_at = float("-inf")
        self._pending: tuple[Any, float] | None = None
        self._started_at = time.time()
        self.failures = 0
        self.last_error: str | None = None

    # -- what the MM asks -------------------------------------------------------------------------
    @property
    def valid(self) -> bool:
        """True while the lease surely has not expired in the operator's eyes."""
        return time.monotonic() < self._deadline

    def remaining_s(self) -> float:
        return max(0.0, self._deadline - time.monotonic())

    # -- lifecycle --------------------------------------------------------------------------------
    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"lease-{self.name}")

    async def stop(self, release: bool = False) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        if release:
            try:
                await asyncio.get_running_loop().run_in_executor(self._executor, self._release)
            except Exception as exc:  # best effort on shutdown
                LOG.debug("lease release failed: %s", exc)
        self._executor.shutdown(wait=False)

    async def renew_once(self) -> bool:
        """One renewal; returns whether it succeeded (also updates ``valid`` and the callbacks)."""
        started = time.monotonic()
        body = self._body(time.time())
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.request_timeout_s):
                await loop.run_in_executor(self._executor, self._write, body)
        except Exception as exc:
            self.failures += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
            LOG.warning("lease %s/%s renewal failed: %s", self.namespace, self.name, self.last_error)
            self._check_expiry()
            return False
        self.renewals += 1
        if self._pending is not None:
            self._sent_key, self._sent_at = self._pending
        self._deadline = max(self._deadline, started + self.duration_s)
        if not self._held:
            self._held = True
            if self.on_renewed is not None:
                self.on_renewed()
        return True

    # -- internals --------------------------------------------------------------------------------
    async def _run(self) -> None:
        while True:
            started = time.monotonic()
            await self.renew_once()
            self._check_expiry()
            # Wake up at the next renewal, or at the deadline if that comes first.
            next_at = started + self.renew_interval_s
            if self._held:
                next_at = min(next_at, self._deadline)
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            self._check_expiry()

    def _check_expiry(self) -> None:
        if self._held and not self.valid:
            self._held = False
            LOG.error("lease %s/%s expired: the MM must stop accepting writes", self.namespace, self.name)
            if self.on_lost is not None:
                self.on_lost()

    def _report_text(self) -> str | None:
        """The report to send with this renewal, if one is due (marked sent once it went out)."""
        if self.report is None:
            return None
        try:
            report = self.report()
            key = decision_key(report)
            if key == self._sent_key and time.monotonic() - self._sent_at < self.report_interval_s:
                return None
            text = json.dumps(report, separators=(",", ":"), sort_keys=True)
        except Exception as exc:  # a broken report must not cost the lease
            LOG.warning("lease report failed: %s", exc)
            return None
        self._pending = (key, time.monotonic())
        return text

    def _labels(self) -> dict[str, str]:
        labels = {LABEL_ROLE: "mm"}
        if self.cluster:
            labels[LABEL_CLUSTER] = self.cluster
        return labels

    def _body(self, now: float) -> dict[str, Any]:
        annotations: dict[str, str | None] = {}
        self._pending = None
        text = self._report_text()
        if text is None:
            pass  # no report, or not due: this renewal carries the renew time only
        elif len(text) > MAX_REPORT_BYTES:
            # Too big to be accepted: renew without it (the last report stays) and say so.
            if not self._oversize:
                LOG.warning("lease report of %d bytes exceeds %d: not sent", len(text), MAX_REPORT_BYTES)
            self._oversize = True
            annotations[REPORT_OVERSIZE_ANNOTATION] = str(len(text))
        else:
            annotations[REPORT_ANNOTATION] = text
            if self._oversize:
                annotations[REPORT_OVERSIZE_ANNOTATION] = None  # a merge patch removes it
            self._oversize = False
        spec: dict[str, Any] = {
            "holderIdentity": self.name,
            "leaseDurationSeconds": round(self.duration_s),
            "renewTime": micro_time(now),
        }
        if self.renewals == 0:
            # A new MM process (incarnation): the operator treats a changed acquireTime as a
            # restart, i.e. a loss of everything this MM held in memory (ISR membership, ...).
            spec["acquireTime"] = micro_time(self._started_at)
        metadata: dict[str, Any] = {"labels": self._labels(), "annotations": annotations}
        if self.pod_uid:
            # A Lease left by an earlier pod of this name becomes ours (and the operator, which
            # ignores a Lease its pod does not own, sees this process at once).
            metadata["ownerReferences"] = [self._owner()]
        return {"metadata": metadata, "spec": spec}

    def _owner(self) -> dict[str, str]:
        return {"apiVersion": "v1", "kind": "Pod", "name": self.name, "uid": str(self.pod_uid)}

    def _get_api(self) -> Any:
        if self._api is None:
            self._api = _default_api()
        return self._api

    def _write(self, body: dict[str, Any]) -> None:
        api = self._get_api()
        timeout = self.request_timeout_s
        try:
            api.patch_namespaced_lease(self.name, self.namespace, body, _request_timeout=timeout)
        except ApiException as exc:
            if exc.status != 404:
                raise
            # Owned by the pod (see _body): garbage-collected with it, so a scaled-away MM leaves no Lease.
            meta = body["metadata"]
            annotations = {k: v for k, v in meta["annotations"].items() if v is not None}
            metadata: dict[str, Any] = {
                "name": self.name,
                "namespace": self.namespace,
                **meta,
                "annotations": annotations,
            }
            created = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": metadata,
                "spec": {"acquireTime": micro_time(self._started_at), **body["spec"], "leaseTransitions": 0},
            }
            api.create_namespaced_lease(self.namespace, created, _request_timeout=timeout)

    def _release(self) -> None:
        """On a clean shutdown: make the lease expire now, so the failover starts at once."""
        api = self._get_api()
        past = micro_time(time.time() - 10 * self.duration_s)
        api.patch_namespaced_lease(
            self.name, self.namespace, {"spec": {"renewTime": past}}, _request_timeout=self.request_timeout_s
        )


def renewer_from_env(
    report: Report | None = None,
    on_lost: Callback | None = None,
    on_renewed: Callback | None = None,
    environ: Mapping[str, str] | None = None,
) -> LeaseRenewer | None:
    """A renewer configured from the pod's environment, or None outside Kubernetes.

    Reads ``HYBRIDMQ_POD_NAME``, ``HYBRIDMQ_POD_UID``, ``HYBRIDMQ_NAMESPACE``, ``HYBRIDMQ_CLUSTER``,
    ``HYBRIDMQ_LEASE_DURATION_SECONDS`` and ``HYBRIDMQ_LEASE_RENEW_MILLISECONDS``.
    """
    import os

    env = os.environ if environ is None else environ
    name = env.get("HYBRIDMQ_POD_NAME")
    namespace = env.get("HYBRIDMQ_NAMESPACE")
    if not name or not namespace or not env.get("KUBERNETES_SERVICE_HOST"):
        return None
    renew_ms = env.get("HYBRIDMQ_LEASE_RENEW_MILLISECONDS")
    return LeaseRenewer(
        name,
        namespace,
        duration_s=float(env.get("HYBRIDMQ_LEASE_DURATION_SECONDS", "1")),
        renew_interval_s=float(renew_ms) / 1000 if renew_ms else None,
        cluster=env.get("HYBRIDMQ_CLUSTER"),
        pod_uid=env.get("HYBRIDMQ_POD_UID"),
        report=report,
        on_lost=on_lost,
        on_renewed=on_renewed,
    )
