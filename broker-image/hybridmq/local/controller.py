"""The broker-only controller of ``hybridmq local``: liveness by heartbeat, the operator's planner.

It plays the operator's part without Kubernetes: each MM heartbeats to it (the
equivalent of renewing its Lease, with the same report as the ``hybridmq.io/report`` annotation);
an MM whose process exited (seen at once: the controller watches the pids its owner started), whose
heartbeat lapsed for ``lease_s``, or that came back as a new process is lost; then the
operator's pure planner (``plan_assignments``) fails its partitions over and the new table is pushed
to every MM and CM, which long-poll it.

HTTP API (aiohttp, loopback only; JSON bodies). Every request must present the cluster secret
(``Authorization: Bearer <secret>``, compared in constant time); anything else gets 401, so another
local user can neither fake a heartbeat, read the table nor kill an MM:

* ``POST /heartbeat`` ``{name, incarnation, report}`` (report: an ``MMReport``) ->
  ``{version, lease_s}``. ``version`` is the table version the MM must have applied before it may
  consider its lease valid (a primary that was stopped learns it is stale before it writes again).
* ``GET /assignments?after=V&wait=S`` -> ``{version, brokers, partitions}`` as soon as the table
  version exceeds ``V`` (or after ``S`` seconds). The format is ``StaticAssignmentSource``'s JSON.
* ``POST /kill/{mm}?signal=KILL|STOP|CONT|TERM`` and ``POST /start/{mm}``: through the callbacks of
  whoever owns the processes (``LocalCluster``).
* ``GET /state``: liveness, reports, the table, the last planner events, failovers and handoffs.

An MM whose report says ``stopping`` (it got SIGTERM) is planned at once as a graceful handoff:
its primaries move to in-sync replicas at ``epoch + 1`` and its backups once replacements caught
up (``planner.scaling.evacuate``); the MM exits when the table no longer names it.

The controller runs its own event loop in a daemon thread (``start``/``stop``), so a synchronous
owner (tests, the ``hybridmq local`` command) can use it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from aiohttp import web

from hybridmq.api.assignment import BrokerEntry, PartitionAssignment, PartitionState
from hybridmq.api.lease_report import MMReport
from hybridmq.api.resources import BrokerClusterSpec
from hybridmq.broker.auth import cluster_secret
from hybridmq.planner import LocalPlan, ReplicaReport, decision_shape, plan_assignments

LOG = logging.getLogger(__name__)

# A report that changes a decision (an epoch, an in-sync set, a partition that became empty) is
# planned within PLAN_EVERY_S; one whose offsets and figures alone moved (every produce moves them)
# waits for the periodic plan, FULL_PLAN_EVERY_S. Planning 1,000 partitions takes a good part of a
# core for a fifth of a second, which the MMs need right after a failover.
PLAN_EVERY_S = 0.25
FULL_PLAN_EVERY_S = 1.0


class BrokerProcesses(Protocol):
    """The broker processes the controller's HTTP API drives (``hybridmq local kill|start|state``):
    every CM and MM of a ``LocalCluster``."""

    def processes(self) -> dict[str, str]:
        """Each broker's process: ``running``, ``stopped``, ``exited <code>`` or ``not started``."""
        ...

    def signal_broker(self, name: str, sig: str) -> None:
        """Send ``SIG<sig>`` (KILL, TERM, STOP, CONT); ``subprocess.TimeoutExpired`` when it does
        not exit in time after KILL or TERM."""
        ...

    def start_broker(self, name: str) -> None:
        """Start it again: ``BrokerBusy`` when its process still runs (or is stopped)."""
        ...


class BrokerBusy(RuntimeError):
    """A broker asked to start whose process still runs (or is stopped)."""


SIGNALS = ("KILL", "TERM", "STOP", "CONT")  # what ``POST /kill/<name>?signal=`` takes
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def replica_reports(
    assignments: Sequence[PartitionAssignment], reports: Mapping[str, MMReport]
) -> dict[str, ReplicaReport]:
    """The planner's per-partition reports from the MMs' own reports (as the operator's observe)."""
    out: dict[str, ReplicaReport] = {}
    for a in assignments:
        if a.primary is None or a.primary not in reports:
            continue
        own = reports[a.primary].partitions.get(a.name)
        if own is None or own.role != "primary":
            continue
        offsets = {
            mm: r.partitions[a.name].log_end_offset for mm, r in reports.items() if a.name in r.partitions
        }
        out[a.name] = ReplicaReport(
            reporter=a.primary,
            epoch=own.epoch,
            in_sync=tuple(own.in_sync),
            log_end_offsets=offsets,
            log_end_offset=own.log_end_offset,
            committed_offset=own.committed_offset,
            backlog=own.backlog,
            producers=own.producers,
            reader_lag=own.reader_lag,
        )
    return out


def cluster_spec(
    *,
    fixed: int,
    replicas: int,
    on_demand_per_mm: int,
    on_demand_replicas: int | None = None,
    retention_after_drain: int = 300,
) -> BrokerClusterSpec:
    """The ``BrokerCluster`` partitions the controller plans (``minInSync`` 2 when it can be)."""
    return BrokerClusterSpec.model_validate(
        {
            "partitions": {
                "fixed": {"count": fixed, "replicas": replicas, "minInSync": min(2, replicas)},
                "onDemand": {
                    "perMessageManager": on_demand_per_mm,
                    "replicas": on_demand_replicas or replicas,
                    "retentionAfterDrainSeconds": retention_after_drain,
                },
            }
        }
    )


@dataclass(frozen=True)
class PlanInputs:
    """One plan's inputs, taken on the controller's loop; ``run`` may go to a worker thread."""

    assignments: tuple[PartitionAssignment, ...]
    live: frozenset[str]
    spec: BrokerClusterSpec
    live_reports: dict[str, MMReport]
    reports: dict[str, ReplicaReport]
    stopping: frozenset[str]

    def run(self) -> LocalPlan:
        return plan_assignments(
            self.assignments, self.live, spec=self.spec, reports=self.reports, stopping=self.stopping
        )


class LocalController:
    def __init__(
        self,
        mm_names: Sequence[str],
        brokers: Sequence[BrokerEntry],
        *,
        spec: BrokerClusterSpec | None = None,
        lease_s: float = 1.0,
        startup_grace_s: float = 20.0,
        host: str = "127.0.0.1",
        port: int = 0,
        processes: BrokerProcesses | None = None,
        secret: str,
    ) -> None:
        self.secret = cluster_secret.require(secret)
        self.mm_names = list(mm_names)
        self.brokers = list(brokers)
        self.spec = spec or BrokerClusterSpec()
        self.lease_s = lease_s
        self.host = host
        self.port = port
        self.processes = processes
        self.version = 1
        self.assignments: tuple[PartitionAssignment, ...] = plan_assignments(
            [], self.mm_names, spec=self.spec
        ).assignments
        self.reports: dict[str, MMReport] = {}
        self.last_seen: dict[str, float] = {}
        self.incarnations: dict[str, str] = {}
        self.restarted: set[str] = set()
        # Process exits: the pid last started under each MM name, and the MMs whose process exited
        # (with the incarnation it had: only a heartbeat of another one brings the name back).
        self._pids: dict[str, int] = {}
        self._pidfds: dict[int, int] = {}
        self._exited: dict[str, str | None] = {}
        self.live: frozenset[str] = frozenset(self.mm_names)
        self.events: list[dict[str, Any]] = []
        self.failovers: list[dict[str, Any]] = []
        self.handoffs: list[dict[str, Any]] = []
        self._planned_stopping: frozenset[str] = frozenset()
        self._grace_until = time.monotonic() + startup_grace_s
        self._dirty = False  # reports changed since the last plan
        self._news = False  # reports changed since the last look at their decision shapes
        self._shapes_changed = False
        self._urgent_pending = False  # urgent news that came while a plan ran
        self._planning = False
        self._planned_shapes: tuple[Any, dict[str, Any]] = ((), {})
        self._last_plan = 0.0
        self._last_plan_at = datetime.now(UTC)  # wall clock: retention is kept in wall time
        self._last_tick: float | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._changed: asyncio.Event | None = None
        self._runner: web.AppRunner | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None

    # -- lifecycle (owner thread) ------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> LocalController:
        self._thread = threading.Thread(target=self._thread_main, name="hybridmq-controller", daemon=True)
        self._thread.start()
        if not self._ready.wait(20):
            raise TimeoutError("the local controller did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(10)

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` on the controller's loop and return its result (from another thread)."""
        assert self._loop is not None

        async def run() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)

    def snapshot(self) -> dict[str, Any]:
        return dict(self.call(self.state))

    def _thread_main(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._changed = asyncio.Event()
        self._stop = asyncio.Event()
        app = web.Application(middlewares=[self._authenticate])
        app.add_routes(
            [
                web.post("/heartbeat", self._h_heartbeat),
                web.get("/assignments", self._h_assignments),
                web.get("/state", self._h_state),
                web.post("/kill/{name}", self._h_kill),
                web.post("/start/{name}", self._h_start),
            ]
        )
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=2.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        server = getattr(site, "_server", None)
        if server is not None and server.sockets:
            self.port = int(server.sockets[0].getsockname()[1])
        self._ready.set()
        ticker = asyncio.create_task(self._ticker())
        await self._stop.wait()
        ticker.cancel()
        for fd in list(self._pidfds):
            self._unwatch(fd)
        # The brokers' long polls (``GET /assignments?wait=10``) answer now: a graceful shutdown
        # waits for every handler, and stopping a cluster took ten seconds of them.
        changed, self._changed = self._changed, None
        changed.set()
        await self._runner.cleanup()

    # -- liveness and planning ---------------------------------------------------------------------
    async def _ticker(self) -> None:
        """Plans in a worker thread: a plan of 1,000 partitions takes a tenth of a second or more,
        and heartbeats held up that long let the MMs' leases lapse in the middle of a failover
        (the Kubernetes API server renews Leases whatever the operator is doing; here one process
        does both)."""
        while True:
            await asyncio.sleep(0.05)
            try:
                if self._plan_due(time.monotonic()):
                    inputs = self._begin_plan(time.monotonic())
                    try:
                        result = await asyncio.to_thread(inputs.run)
                    finally:
                        self._planning = False
                    self._finish_plan(inputs, result)
            except Exception:
                LOG.exception("controller tick failed")

    def _alive(self, name: str, now: float) -> bool:
        if name in self.restarted or name in self._exited:
            return False
        seen = self.last_seen.get(name)
        if seen is None:
            return now < self._grace_until
        return now - seen <= self.lease_s

    def tick(self) -> None:
        """Decide and, if due, plan in the caller's thread (tests; a restarted MM's heartbeat)."""
        now = time.monotonic()
        if self._plan_due(now):
            self.replan(now)

    def _plan_due(self, now: float) -> bool:
        """Take in liveness and reports; whether a plan is due (never while one is running: what
        came meanwhile is kept for the next)."""
        self._forgive_own_stall(now)
        live = frozenset(m for m in self.mm_names if self._alive(m, now))
        urgent = live != self.live or self._urgent()
        if live != self.live:
            for m in sorted(self.live - live):
                why = "process exited" if m in self._exited else "heartbeat lapsed or process restarted"
                self._event("MessageManagerLost", f"{m}: {why}")
            for m in sorted(live - self.live):
                self._event("MessageManagerBack", f"{m} heartbeats again")
        self.live = live
        if self._news:
            self._news = False
            holdings, shapes = self._decision_shapes(self._live_reports(), self.assignments)
            planned_holdings, planned = self._planned_shapes
            changed = {n for n in shapes.keys() | planned.keys() if shapes.get(n) != planned.get(n)}
            if changed or holdings != planned_holdings:
                self._shapes_changed = True
                urgent = urgent or self._report_urgent(changed)
        self._urgent_pending = self._urgent_pending or urgent
        if self._planning:
            return False
        since = now - self._last_plan
        return (
            self._urgent_pending
            or (self._shapes_changed and since >= PLAN_EVERY_S)
            or (self._dirty and since >= FULL_PLAN_EVERY_S)
        )

    # -- process exits: certain evidence ----------------------------------------------------------
    def process_started(self, name: str, pid: int) -> None:
        """The owner of the brokers started MM ``name`` as process ``pid`` (from any thread).

        A process that ended can neither write nor acknowledge, so its exit is certain evidence of
        the loss, and the MM is failed over the moment it happens (a pidfd on the controller's
        loop) instead of a lease later. A frozen or unreachable MM has not exited: the lease still
        decides those, and the lease still fences a primary that only lost its heartbeats."""
        if name not in self.mm_names:
            return
        if self._loop is None:  # not started (tests): only the bookkeeping
            self._pids[name] = pid
            return
        try:
            self._loop.call_soon_threadsafe(self._watch, name, pid)
        except RuntimeError:  # the controller stopped: nobody fails anything over any more
            pass

    def _watch(self, name: str, pid: int) -> None:
        self._pids[name] = pid
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:  # gone (and reaped) already
            self.process_exited(name, pid)
            return
        except OSError as exc:  # no pidfd here: the lease alone decides
            LOG.warning("cannot watch %s (pid %d) for its exit: %s", name, pid, exc)
            return
        self._pidfds[fd] = pid
        asyncio.get_running_loop().add_reader(fd, self._pidfd_readable, name, pid, fd)

    def _unwatch(self, fd: int) -> None:
        if self._pidfds.pop(fd, None) is not None and self._loop is not None:
            self._loop.remove_reader(fd)
            os.close(fd)

    def _pidfd_readable(self, name: str, pid: int, fd: int) -> None:
        self._unwatch(fd)
        self.process_exited(name, pid)

    def process_exited(self, name: str, pid: int) -> None:
        """``pid`` ended. If it is the process last started as ``name``, that MM is lost now; a late
        heartbeat of its incarnation does not bring it back, one of a new process does."""
        if self._pids.get(name) != pid:
            return  # an older process of that name
        self._exited[name] = self.incarnations.get(name)
        LOG.info("%s: process %d exited", name, pid)

    def _live_reports(self) -> dict[str, MMReport]:
        return {m: r for m, r in self.reports.items() if m in self.live}

    def _stopping(self) -> frozenset[str]:
        """Live MMs whose report asks for a graceful handoff (they got SIGTERM)."""
        return frozenset(m for m, r in self.reports.items() if r.stopping and m in self.live)

    @staticmethod
    def _decision_shapes(
        live_reports: Mapping[str, MMReport], assignments: Sequence[PartitionAssignment]
    ) -> tuple[Any, dict[str, Any]]:
        """What of the live MMs' reports the planner decides on (``decision_shape`` per partition,
        which partitions each MM holds); offsets and figures left out."""
        per_partition = replica_reports(assignments, live_reports)
        return (
            tuple(sorted((m, frozenset(r.partitions)) for m, r in live_reports.items())),
            {name: decision_shape(r) for name, r in per_partition.items()},
        )

    def _urgent(self) -> bool:
        """An MM asks for a graceful handoff or a draining partition's retention ran out since
        the last plan."""
        if self._stopping() != self._planned_stopping:
            return True
        return any(
            a.state == PartitionState.DRAINING and self._retention_ran_out(a) for a in self.assignments
        )

    def _report_urgent(self, changed: set[str]) -> bool:
        """Partitions whose decision shapes changed propose a different in-sync set or are empty
        and draining: plan at once. Only news counts: the same inputs give the same plan, and
        re-planning every partition on every tick while a report disagrees with the table (a new
        primary still naming a lost backup in sync) takes the CPU the brokers need right after a
        failover."""
        for a in self.assignments:
            if a.name not in changed:
                continue
            own = self.reports.get(a.primary or "")
            rep = own.partitions.get(a.name) if own is not None else None
            if rep is None or rep.role != "primary" or rep.epoch != a.epoch:
                continue
            if set(rep.in_sync) != set(a.in_sync):
                return True
            if a.state == PartitionState.DRAINING and rep.backlog == 0:
                return True
        return False

    def _retention_ran_out(self, a: PartitionAssignment) -> bool:
        """An empty draining partition's retention passed since the last plan: plan now (nothing
        else may change)."""
        if a.drained_since is None:
            return False
        kept = timedelta(seconds=self.spec.partitions.on_demand.retention_after_drain_seconds)
        over = a.drained_since + kept
        return self._last_plan_at < over <= datetime.now(UTC)

    def _forgive_own_stall(self, now: float) -> None:
        """Time the controller itself did not run (a starved process) is not held against the MMs:
        their heartbeats may be waiting unread. A frozen MM is still fenced by its own lease."""
        last, self._last_tick = self._last_tick, now
        if last is None:
            return
        stalled = now - last
        if stalled > self.lease_s / 2:
            LOG.warning("controller did not run for %.2f s: liveness decisions wait for heartbeats", stalled)
            for name, seen in self.last_seen.items():
                self.last_seen[name] = min(now, seen + stalled)

    def replan(self, now: float | None = None) -> None:
        inputs = self._begin_plan(now if now is not None else time.monotonic())
        try:
            result = inputs.run()
        finally:
            self._planning = False
        self._finish_plan(inputs, result)

    def _begin_plan(self, now: float) -> PlanInputs:
        """Take the inputs of a plan; news that arrives while it runs waits for the next one."""
        self._planning = True
        self._last_plan = now
        self._last_plan_at = datetime.now(UTC)
        self._dirty = self._shapes_changed = self._urgent_pending = False
        self.restarted.clear()  # taken into the live set already
        live_reports = self._live_reports()
        self._planned_stopping = self._stopping()
        return PlanInputs(
            assignments=self.assignments,
            live=self.live,
            spec=self.spec,
            live_reports=live_reports,
            reports=replica_reports(self.assignments, live_reports),
            stopping=self._planned_stopping,
        )

    def _finish_plan(self, inputs: PlanInputs, result: LocalPlan) -> None:
        for change in result.plan.changes:
            for ev in getattr(change, "events", ()) or ():
                self._event(ev.reason, ev.message)
                if ev.reason == "FailedOver":
                    self.failovers.append({"time": time.time(), "message": ev.message})
                elif ev.reason == "HandedOff":
                    self.handoffs.append({"time": time.time(), "message": ev.message})
        if result.assignments != self.assignments:
            self.assignments = result.assignments
            self.version += 1
            LOG.debug(
                "assignments v%d: %s", self.version, [a.model_dump(mode="json") for a in self.assignments]
            )
            if self._changed is not None:
                self._changed.set()
                self._changed = asyncio.Event()
        # The reports the plan saw against the table it made: a report that came meanwhile is news.
        self._planned_shapes = self._decision_shapes(inputs.live_reports, self.assignments)

    def _event(self, reason: str, message: str) -> None:
        LOG.info("%s: %s", reason, message)
        self.events.append({"time": time.time(), "reason": reason, "message": message})
        del self.events[:-200]

    def table(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "brokers": [b.model_dump(mode="json") for b in self.brokers],
            "partitions": [a.model_dump(mode="json") for a in self.assignments],
        }

    def state(self) -> dict[str, Any]:
        now = time.monotonic()
        return {
            **self.table(),
            "live": sorted(self.live),
            "exited": sorted(self._exited),
            "last_seen_s": {m: round(now - t, 3) for m, t in self.last_seen.items()},
            "reports": {m: r.model_dump(mode="json") for m, r in self.reports.items()},
            "events": self.events[-50:],
            "failovers": self.failovers,
            "handoffs": self.handoffs,
            "stopping": sorted(self._stopping()),
            **({"processes": self.processes.processes()} if self.processes is not None else {}),
        }

    def heartbeat(self, name: str, incarnation: str, report: MMReport | None) -> dict[str, Any]:
        if name not in self.mm_names:
            raise web.HTTPNotFound(text=f"unknown message manager {name!r}")
        known = self.incarnations.get(name)
        if known is not None and known != incarnation:
            # A new process behind the same name: what the old one held in memory is gone.
            self.restarted.add(name)
            self.reports.pop(name, None)
            self._urgent_pending = True  # a plan takes it in (also when it was lost already)
        self.incarnations[name] = incarnation
        if name in self._exited and self._exited[name] != incarnation:
            del self._exited[name]  # a new process: it joins as a restarted MM does
        self.last_seen[name] = time.monotonic()
        if report is not None:
            old = self.reports.get(name)
            if old is None or old != report:
                self._dirty = self._news = True
            self.reports[name] = report
        return {"version": self.version, "lease_s": self.lease_s}

    # -- HTTP handlers -----------------------------------------------------------------------------
    @web.middleware
    async def _authenticate(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if not cluster_secret.bearer_matches(self.secret, request.headers.get("Authorization")):
            LOG.warning(
                "refused %s %s from %s: no valid cluster secret", request.method, request.path, request.remote
            )
            raise web.HTTPUnauthorized(text="the local controller needs the cluster secret\n")
        return await handler(request)

    async def _h_heartbeat(self, request: web.Request) -> web.Response:
        body = await request.json()
        report = MMReport.model_validate(body["report"]) if body.get("report") is not None else None
        name = str(body["name"])
        reply = self.heartbeat(name, str(body.get("incarnation", "")), report)
        reply["restarted"] = name in self.restarted
        if reply["restarted"]:
            self.tick()  # fail the old incarnation over at once
        return web.json_response(reply)

    async def _h_assignments(self, request: web.Request) -> web.Response:
        after = int(request.query.get("after", "0"))
        wait = min(float(request.query.get("wait", "0")), 30.0)
        if self.version <= after and wait > 0 and self._changed is not None:
            try:
                async with asyncio.timeout(wait):
                    await self._changed.wait()
            except TimeoutError:
                pass
        return web.json_response(self.table())

    async def _h_state(self, request: web.Request) -> web.Response:
        return web.json_response(self.state())

    def _broker(self, request: web.Request, verb: str) -> str:
        name = request.match_info["name"]
        known = self.processes.processes() if self.processes is not None else {}
        if name not in known:
            raise web.HTTPNotFound(text=f"cannot {verb} {name!r} (the brokers are {', '.join(known)})")
        return name

    async def _h_kill(self, request: web.Request) -> web.Response:
        name = self._broker(request, "signal")
        sig = request.query.get("signal", "KILL").upper()
        if sig not in SIGNALS:
            raise web.HTTPBadRequest(text=f"unknown signal {sig!r} (one of {', '.join(SIGNALS)})")
        assert self.processes is not None
        try:
            await asyncio.get_running_loop().run_in_executor(None, self.processes.signal_broker, name, sig)
        except subprocess.TimeoutExpired as exc:
            raise web.HTTPGatewayTimeout(
                text=f"{name} did not exit {exc.timeout:g} s after SIG{sig}"
            ) from None
        return web.json_response({"name": name, "signal": sig})

    async def _h_start(self, request: web.Request) -> web.Response:
        name = self._broker(request, "start")
        assert self.processes is not None
        try:
            await asyncio.get_running_loop().run_in_executor(None, self.processes.start_broker, name)
        except BrokerBusy as exc:
            raise web.HTTPConflict(text=str(exc)) from None
        except (RuntimeError, TimeoutError) as exc:  # it exited again, or never listened
            raise web.HTTPInternalServerError(text=f"{name} did not start: {exc}") from None
        return web.json_response({"name": name, "started": True})
