"""The production ``AssignmentSource``: follow the operator's decisions through the API server.

It watches, in the pod's namespace, the ``Partition`` resources of its cluster (their status holds
the operator's decisions: epoch, primary, replicas, in-sync set), the ``BrokerCluster`` itself
(its ``status.brokers`` is the broker table) and the cluster's assignment map
(``hybridmq.api.assignment_map``: a failover's new primaries of many partitions in one ConfigMap,
written before the Partition statuses follow; an entry wins over its Partition while its epoch is
higher). A Partition being deleted (``deletionTimestamp`` set)
disappears from the assignments at once: that is the MM's signal to drop the data; the operator
releases the Partition's finalizer once no live MM reports the partition in its Lease any more.

The official ``kubernetes`` client is synchronous, so each watch runs in its own daemon thread
(list, then watch from the list's resourceVersion; a ``410 Gone`` or any error relists) and hands
each change to the event loop, where the tables are replaced and the listeners called. A Partition
never goes back to an older version there: the relist after a lost lease and the watch thread hand
over their views separately.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, cast

from pydantic import ValidationError

from hybridmq.api import assignment_map
from hybridmq.api.assignment import BrokerEntry, PartitionAssignment
from hybridmq.api.resources import GROUP, VERSION, BrokerCluster, Partition, partition_to_assignment
from hybridmq.broker.assignment_source import AssignmentSource

LOG = logging.getLogger(__name__)

PARTITIONS = "partitions"
CLUSTERS = "brokerclusters"
MAP = "configmaps"  # the cluster's assignment map, one ConfigMap


def load_api_client() -> Any:
    """In-cluster config in a pod, the kubeconfig elsewhere (tests, tooling)."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.ApiClient()


def _rv(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _rv_number(rv: str) -> int | None:
    """A resourceVersion as the number etcd gives it (None if it is not one)."""
    return int(rv) if rv.isdigit() else None


def _older(rv: str, than: str) -> bool:
    """``rv`` is an older version than ``than`` (both numbers; anything else is not older). The
    relist after a lost lease and the watch thread hand over their views separately: an event the
    watch read before the listing must not undo what the listing applied."""
    a, b = _rv_number(rv), _rv_number(than)
    return a is not None and b is not None and a < b


class KubeAssignmentSource(AssignmentSource):
    """Assignments and broker table of one BrokerCluster, kept current by two watches."""

    def __init__(
        self,
        cluster: str,
        namespace: str,
        *,
        api_client: Any = None,
        watch_timeout_s: int = 60,
        retry_backoff_s: float = 0.5,
        silence_slack_s: float = 30.0,
    ) -> None:
        super().__init__()
        self.cluster = cluster
        self.namespace = namespace
        self._api_client = api_client
        self.watch_timeout_s = watch_timeout_s
        self.retry_backoff_s = retry_backoff_s
        # A watch silent this much longer than the server's own end of it is a dead connection.
        self.silence_slack_s = silence_slack_s
        self._partitions: dict[str, PartitionAssignment] = {}
        self._brokers: dict[str, BrokerEntry] = {}
        self._raw_partitions: dict[str, dict[str, Any]] = {}
        self._cluster_body: dict[str, Any] | None = None
        self._map: dict[str, assignment_map.MapEntry] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._synced: dict[str, asyncio.Event] = {}
        self._notify_pending = False

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> KubeAssignmentSource:
        """From the pod's ``HYBRIDMQ_CLUSTER`` and ``HYBRIDMQ_NAMESPACE``."""
        env = os.environ if environ is None else environ
        return cls(env["HYBRIDMQ_CLUSTER"], env.get("HYBRIDMQ_NAMESPACE", "default"))

    # -- AssignmentSource -------------------------------------------------------------------------
    def partitions(self) -> dict[str, PartitionAssignment]:
        return self._partitions

    def brokers(self) -> dict[str, BrokerEntry]:
        return self._brokers

    async def start(self, sync_timeout_s: float = 10.0) -> None:
        """Start both watches and wait (up to ``sync_timeout_s``) for their first listing."""
        if self._threads:
            return
        self._loop = asyncio.get_running_loop()
        if self._api_client is None:
            self._api_client = await asyncio.to_thread(load_api_client)
        self._stop.clear()
        for plural in (PARTITIONS, CLUSTERS, MAP):
            self._synced[plural] = asyncio.Event()
            thread = threading.Thread(
                target=self._watch_forever, args=(plural,), name=f"kube-source-{plural}", daemon=True
            )
            self._threads.append(thread)
            thread.start()
        try:
            async with asyncio.timeout(sync_timeout_s):
                await asyncio.gather(*(e.wait() for e in self._synced.values()))
        except TimeoutError:
            LOG.warning("assignment source: no initial listing after %.1fs, continuing", sync_timeout_s)

    async def stop(self) -> None:
        self._stop.set()
        threads, self._threads = self._threads, []
        for thread in threads:
            await asyncio.to_thread(thread.join, 2.0)

    async def refresh(self) -> None:
        """List the Partitions again and apply the listing (raises on failure)."""
        from kubernetes import client

        api = client.CustomObjectsApi(self._api_client)
        listed = await asyncio.to_thread(
            api.list_namespaced_custom_object, GROUP, VERSION, self.namespace, PARTITIONS, _request_timeout=5
        )
        listing = cast(dict[str, Any], listed)
        self.apply_listing(PARTITIONS, list(listing.get("items", [])), _rv(listing))

    def synced(self) -> bool:
        """Both watches delivered their first listing."""
        return bool(self._synced) and all(e.is_set() for e in self._synced.values())

    # -- conversion (pure, tested without a cluster) ----------------------------------------------
    def min_in_sync_default(self) -> int | None:
        if self._cluster_body is None:
            return None
        try:
            return BrokerCluster.model_validate(self._cluster_body).spec.partitions.fixed.min_in_sync
        except ValidationError:
            return None

    def assignment_of(self, body: Mapping[str, Any]) -> PartitionAssignment | None:
        """The assignment a Partition body stands for; None if it is not ours or is being deleted."""
        meta = body.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            return None
        try:
            partition = Partition.model_validate(body)
        except ValidationError as exc:
            LOG.warning("ignoring malformed Partition %s: %s", meta.get("name"), exc)
            return None
        if partition.spec.cluster != self.cluster:
            return None
        entry = self._map.get(str(meta.get("name")))
        status = partition.status
        epoch = status.epoch if status else 0
        rv = str(meta.get("resourceVersion") or "")
        if assignment_map.ahead(entry, meta.get("uid"), epoch, rv, status.in_sync if status else ()):
            assert entry is not None
            partition = partition.model_copy(update={"status": entry.applied_to(status)})
        mis = partition.spec.min_in_sync
        if mis is None:
            default = self.min_in_sync_default()
            mis = min(default, partition.spec.replicas) if default is not None else None
        return partition_to_assignment(partition, min_in_sync=mis)

    def brokers_of(self, body: Mapping[str, Any] | None) -> dict[str, BrokerEntry]:
        if body is None:
            return {}
        try:
            cluster = BrokerCluster.model_validate(body)
        except ValidationError as exc:
            LOG.warning("ignoring malformed BrokerCluster: %s", exc)
            return {}
        return {e.name: e for e in (cluster.status.broker_entries() if cluster.status else [])}

    def _rebuild(self) -> None:
        """Recompute everything (a listing, or the cluster's defaults changed)."""
        partitions: dict[str, PartitionAssignment] = {}
        for body in self._raw_partitions.values():
            assignment = self.assignment_of(body)
            if assignment is not None:
                partitions[assignment.name] = assignment
        brokers = self.brokers_of(self._cluster_body)
        if partitions != self._partitions or brokers != self._brokers:
            self._partitions = partitions
            self._brokers = brokers
            self._changed()

    def _update_one(self, name: str, body: Mapping[str, Any] | None) -> None:
        """One Partition changed: recompute only its assignment (events are O(1), not O(n))."""
        assignment = self.assignment_of(body) if body is not None else None
        if self._partitions.get(name) == assignment:
            return
        partitions = dict(self._partitions)
        if assignment is None:
            partitions.pop(name, None)
        else:
            partitions[name] = assignment
        self._partitions = partitions
        self._changed()

    def _changed(self) -> None:
        """Notify the listeners once per burst of changes (once per loop iteration)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._notify()
            return
        if not self._notify_pending:
            self._notify_pending = True
            loop.call_soon(self._flush_notify)

    def _flush_notify(self) -> None:
        self._notify_pending = False
        self._notify()

    # -- applying watch events on the loop --------------------------------------------------------
    def apply_listing(self, plural: str, items: list[dict[str, Any]], listed_at: str = "") -> None:
        """A full listing (taken at resourceVersion ``listed_at``) replaces what was known, but for
        Partitions an event applied meanwhile shows newer than the listing."""
        if plural == MAP:
            self._apply_map(items[0] if items else None)
            if (event := self._synced.get(plural)) is not None:
                event.set()
            return
        if plural == PARTITIONS:
            listed = {str(i["metadata"]["name"]): i for i in items}
            for name, body in self._raw_partitions.items():
                if _older(listed_at, _rv(body)) and not _older(_rv(body), _rv(listed.get(name) or {})):
                    listed[name] = body
            self._raw_partitions = listed
        else:
            named = [i for i in items if i.get("metadata", {}).get("name") == self.cluster]
            self._cluster_body = named[0] if named else None
        self._rebuild()
        event = self._synced.get(plural)
        if event is not None:
            event.set()

    def _apply_map(self, body: Mapping[str, Any] | None) -> None:
        """A new assignment map: recompute the partitions its old and new entries name."""
        try:
            entries = assignment_map.decode(((body or {}).get("data") or {}).get(assignment_map.DATA_KEY))
        except assignment_map.AssignmentMapError as exc:
            LOG.warning("ignoring the assignment map: %s", exc)
            return
        touched = set(self._map) | set(entries)
        self._map = entries
        for name in touched:
            self._update_one(name, self._raw_partitions.get(name))

    def apply_event(self, plural: str, kind: str, obj: dict[str, Any]) -> None:
        name = str((obj.get("metadata") or {}).get("name"))
        if plural == MAP:
            self._apply_map(None if kind == "DELETED" else obj)
        elif plural == PARTITIONS:
            if kind == "DELETED":
                self._raw_partitions.pop(name, None)
                self._update_one(name, None)
            else:
                known = self._raw_partitions.get(name)
                if known is not None and _older(_rv(obj), _rv(known)):
                    return  # read before a listing that applied a newer version
                self._raw_partitions[name] = obj
                self._update_one(name, obj)
        elif name == self.cluster:
            before = self.min_in_sync_default()
            self._cluster_body = None if kind == "DELETED" else obj
            if self.min_in_sync_default() != before:
                self._rebuild()
                return
            brokers = self.brokers_of(self._cluster_body)
            if brokers != self._brokers:
                self._brokers = brokers
                self._changed()

    def _post(self, fn: Callable[..., None], *args: Any) -> None:
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(fn, *args)

    # -- the watch threads ------------------------------------------------------------------------
    def _watch_forever(self, plural: str) -> None:
        from kubernetes import client, watch
        from kubernetes.client.exceptions import ApiException

        kwargs: dict[str, Any] = {}
        if plural == CLUSTERS:
            kwargs["field_selector"] = f"metadata.name={self.cluster}"
        lister: Callable[..., Any]
        if plural == MAP:
            # Through the core API, as plain dicts like the custom objects (a function without a
            # docstring makes the watch hand over the raw objects instead of V1ConfigMap models).
            core = client.CoreV1Api(self._api_client)
            kwargs["field_selector"] = f"metadata.name={assignment_map.configmap_name(self.cluster)}"
            args: tuple[Any, ...] = (self.namespace,)

            def lister(*a: Any, **kw: Any) -> Any:
                if kw.get("watch"):
                    return core.list_namespaced_config_map(*a, **kw)
                raw: Any = core.list_namespaced_config_map(*a, **{**kw, "_preload_content": False})
                return json.loads(raw.data)

        else:
            api = client.CustomObjectsApi(self._api_client)
            lister = api.list_namespaced_custom_object
            args = (GROUP, VERSION, self.namespace, plural)
        while not self._stop.is_set():
            try:
                listing = cast(dict[str, Any], lister(*args, **{**kwargs, "_request_timeout": 30}))
                rv = str(listing.get("metadata", {}).get("resourceVersion") or "")
                self._post(self.apply_listing, plural, list(listing.get("items", [])), rv)
                while not self._stop.is_set():
                    stream = watch.Watch().stream(
                        lister,
                        *args,
                        resource_version=rv,
                        timeout_seconds=self.watch_timeout_s,
                        allow_watch_bookmarks=True,
                        # The server ends the watch after ``watch_timeout_s``; a connection that went
                        # silent without closing (a lost route to the API server) would otherwise
                        # block this thread, and leave the MM on a stale table, for ever: relist.
                        _request_timeout=(10, self.watch_timeout_s + self.silence_slack_s),
                        **kwargs,
                    )
                    for event in stream:
                        if self._stop.is_set():
                            return
                        kind = str(event.get("type"))
                        obj = event.get("object")
                        if kind == "ERROR":
                            raise ApiException(status=int((obj or {}).get("code") or 500))
                        if not isinstance(obj, dict):
                            continue
                        rv = _rv(obj) or rv
                        if kind != "BOOKMARK":
                            self._post(self.apply_event, plural, kind, obj)
            except ApiException as exc:
                if exc.status != 410:
                    LOG.warning("watch of %s failed (%s); relisting", plural, exc.status)
                    time.sleep(self.retry_backoff_s)
            except Exception as exc:
                LOG.warning("watch of %s failed: %s; relisting", plural, exc)
                time.sleep(self.retry_backoff_s)


def source_from_env(environ: Mapping[str, str] | None = None) -> KubeAssignmentSource | None:
    """The Kubernetes source when the pod asks for it (``HYBRIDMQ_ASSIGNMENT_SOURCE=kubernetes``,
    set by the operator on every broker pod), else None (use a static or file source)."""
    env = os.environ if environ is None else environ
    if env.get("HYBRIDMQ_ASSIGNMENT_SOURCE") != "kubernetes" or not env.get("HYBRIDMQ_CLUSTER"):
        return None
    return KubeAssignmentSource.from_env(env)
