"""Kubernetes watches (official `kubernetes` client) feeding `DemoState` and the `FailoverTracker`.

One thread per kind: list, then watch from the list's resourceVersion for a few seconds, repeat
until stopped. A re-list reconciles (objects missing from it count as deleted), so a dropped watch
loses nothing. Pods and Partitions come from the demo namespace; the node is polled.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from kubernetes import client, watch

from hybridmq.api.resources import GROUP, VERSION, Partition
from hybridmq_demo.state import DemoState, PartitionRow, PodRow
from hybridmq_demo.timeline import FailoverTracker

WATCH_SECONDS = 3
ROLE_LABELS = ("hybridmq.io/role", "app.kubernetes.io/component")


def pod_row(pod: client.V1Pod) -> PodRow:
    meta = pod.metadata or client.V1ObjectMeta()
    status = pod.status or client.V1PodStatus()
    labels = meta.labels or {}
    role = next((labels[k] for k in ROLE_LABELS if labels.get(k)), "-")
    ready = any(c.type == "Ready" and c.status == "True" for c in (status.conditions or []))
    restarts = 0
    reason = ""
    for cs in status.container_statuses or []:
        restarts += cs.restart_count or 0
        state = cs.state
        if state is not None and state.waiting is not None and state.waiting.reason:
            reason = reason or state.waiting.reason
        elif state is not None and state.terminated is not None and state.terminated.reason:
            reason = reason or state.terminated.reason
    return PodRow(
        name=meta.name or "?",
        role=role,
        ip=status.pod_ip or "",
        phase=status.phase or "Unknown",
        ready=ready,
        restarts=restarts,
        deleting=meta.deletion_timestamp is not None,
        reason=reason,
    )


def partition_row(obj: dict[str, Any]) -> PartitionRow:
    part = Partition.model_validate(obj)
    st = part.status
    return PartitionRow(
        name=part.metadata.name or "?",
        type=str(part.spec.type),
        state=str(st.state) if st else "Pending",
        primary=(st.primary if st else None) or "",
        epoch=st.epoch if st else 0,
        backlog=st.backlog if st else 0,
        in_sync=tuple(st.in_sync) if st else (),
        replicas=tuple(st.replicas) if st else (),
        spec_replicas=part.spec.replicas,
        accept_writes=st.accept_writes if st else True,
        deleting=part.metadata.deletion_timestamp is not None,
        producers=st.producers if st else 0,
        reported_epoch=st.reported_epoch if st else None,
    )


class _Loop(threading.Thread):
    """list -> watch(WATCH_SECONDS) -> repeat, until `stop` is set. Errors are logged once each."""

    def __init__(
        self,
        name: str,
        state: DemoState,
        stop: threading.Event,
        list_call: Callable[..., Any],
        list_args: tuple[Any, ...],
        apply_list: Callable[[Iterable[Any]], None],
        apply_event: Callable[[str, Any], None],
        rv_of: Callable[[Any], str],
    ) -> None:
        super().__init__(name=f"watch-{name}", daemon=True)
        self.what = name
        self.state = state
        self.stop_event = stop
        self.list_call = list_call
        self.list_args = list_args
        self.apply_list = apply_list
        self.apply_event = apply_event
        self.rv_of = rv_of
        self._last_error = ""

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                listed = self.list_call(*self.list_args, _request_timeout=10)
                self.apply_list(listed["items"] if isinstance(listed, dict) else listed.items)
                w = watch.Watch()
                # The bound API method itself (not a wrapper): Watch reads its docstring to
                # deserialize events into typed objects.
                for event in w.stream(
                    self.list_call,
                    *self.list_args,
                    resource_version=self.rv_of(listed),
                    timeout_seconds=WATCH_SECONDS,
                    _request_timeout=WATCH_SECONDS + 5,
                ):
                    if self.stop_event.is_set():
                        w.stop()
                        break
                    if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                        self.apply_event(event["type"], event["object"])
                self._last_error = ""
            except Exception as exc:
                if isinstance(exc, client.ApiException) and exc.status == 404:
                    self.stop_event.wait(1.0)  # the CRDs are not installed yet
                    continue
                text = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
                if text != self._last_error and not self.stop_event.is_set():
                    self.state.emit(f"watch {self.what}: {text} (retrying)")
                self._last_error = text
                self.stop_event.wait(1.0)


class ClusterWatcher:
    """Watches pods and Partitions of `namespace`, and polls the node's Ready condition."""

    def __init__(
        self, api_client: Any, namespace: str, node: str, state: DemoState, tracker: FailoverTracker
    ) -> None:
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.namespace = namespace
        self.node = node
        self.state = state
        self.tracker = tracker
        self.stop_event = threading.Event()
        self._uids: dict[str, str] = {}
        self._threads: list[threading.Thread] = []

    # ------------------------------------------------------------------------------------ pods
    def _pod_event(self, kind: str, pod: client.V1Pod) -> None:
        meta = pod.metadata or client.V1ObjectMeta()
        name, uid = meta.name or "?", meta.uid or ""
        if kind == "DELETED":
            if self._uids.get(name) == uid:
                self._uids.pop(name, None)
                self.state.remove_pod(name)
            self.tracker.on_pod_deleted(name, uid)
            return
        row = pod_row(pod)
        self._uids[name] = uid
        self.state.upsert_pod(row)
        self.tracker.on_pod(row, uid)

    def _pod_list(self, pods: Iterable[client.V1Pod]) -> None:
        seen: set[str] = set()
        for pod in pods:
            seen.add((pod.metadata.name if pod.metadata else None) or "?")
            self._pod_event("MODIFIED", pod)
        for name in set(self._uids) - seen:
            uid = self._uids.pop(name)
            self.state.remove_pod(name)
            self.tracker.on_pod_deleted(name, uid)

    def uid_of(self, pod: str) -> str | None:
        return self._uids.get(pod)

    # ------------------------------------------------------------------------------ partitions
    def _partition_event(self, kind: str, obj: dict[str, Any]) -> None:
        name = obj.get("metadata", {}).get("name", "")
        if kind == "DELETED":
            self.state.remove_partition(name)
            self.tracker.on_partition_deleted(name)
            return
        try:
            row = partition_row(obj)
        except Exception as exc:
            self.state.emit(f"partition {name}: cannot parse ({exc.__class__.__name__}: {exc})"[:300])
            return
        old = self.state.upsert_partition(row)
        self.tracker.on_partition(row, old)

    def _partition_list(self, objs: Iterable[dict[str, Any]]) -> None:
        seen: set[str] = set()
        for obj in objs:
            seen.add(obj["metadata"]["name"])
            self._partition_event("MODIFIED", obj)
        for row in self.state.all_partitions():
            if row.name not in seen:
                self._partition_event("DELETED", {"metadata": {"name": row.name}})

    # ------------------------------------------------------------------------------------ node
    def _poll_node(self) -> None:
        while not self.stop_event.is_set():
            try:
                node = self.core.read_node(self.node, _request_timeout=5)
                conditions = (node.status.conditions if node.status else None) or []
                ready = next((c for c in conditions if c.type == "Ready"), None)
                self.state.set_node(
                    f"{self.node} {'Ready' if ready and ready.status == 'True' else 'NotReady'}"
                )
            except Exception as exc:
                self.state.set_node(f"{self.node} unknown ({type(exc).__name__})")
            self.stop_event.wait(2.0)

    # ------------------------------------------------------------------------------- lifecycle
    def start(self) -> None:
        self._threads = [
            _Loop(
                "pods",
                self.state,
                self.stop_event,
                self.core.list_namespaced_pod,
                (self.namespace,),
                self._pod_list,
                self._pod_event,
                lambda listed: listed.metadata.resource_version,
            ),
            _Loop(
                "partitions",
                self.state,
                self.stop_event,
                self.custom.list_namespaced_custom_object,
                (GROUP, VERSION, self.namespace, Partition.PLURAL),
                self._partition_list,
                self._partition_event,
                lambda listed: listed["metadata"]["resourceVersion"],
            ),
            threading.Thread(target=self._poll_node, name="watch-node", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def stop(self, timeout: float = WATCH_SECONDS + 6) -> None:
        self.stop_event.set()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
