"""The demo's steps in order, the verdict, and the teardown.

    cluster up -> helm install -> BrokerCluster ready -> load -> kill a primary MM -> failover
    -> stop load, drain -> audit -> verdict (last line) -> cluster down (unless --keep)

A step that cannot be done fails the demo with its reason (``verdict=FAIL <step>: <reason>``);
once load has run, the later steps still run (bounded) so that the audit reports what happened.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client

from hybridmq_demo.audit_step import AuditResult, export_consumed, run_audit
from hybridmq_demo.cluster import DemoCluster
from hybridmq_demo.install import NAMESPACE, Installer, Topology
from hybridmq_demo.load import LoadConfig, LoadRunner
from hybridmq_demo.state import DemoState
from hybridmq_demo.timeline import FIXED, FailoverTracker, Timeline
from hybridmq_demo.view import HeadlessView, LiveView, View, timeline_lines
from hybridmq_demo.waiting import StepFailed, wait_until
from hybridmq_demo.watch import ClusterWatcher


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m hybridmq_demo", description="Watch a HybridMQ failover on the local cluster."
    )
    parser.add_argument("--headless", action="store_true", help="plain timestamped lines (CI), no Live view")
    parser.add_argument("--dir", type=Path, default=Path(".localcluster"), help="local cluster directory")
    parser.add_argument("--keep", action="store_true", help="leave the cluster running at the end")
    timing = parser.add_argument_group("timings (seconds)")
    timing.add_argument("--warmup", type=float, default=4.0, help="load before the kill")
    timing.add_argument("--after", type=float, default=6.0, help="load after the failover")
    timing.add_argument("--failover-timeout", type=float, default=60.0, help="wait for the new epoch")
    timing.add_argument("--drain-timeout", type=float, default=60.0, help="wait for consumers / GC")
    timing.add_argument("--install-timeout", type=float, default=180.0, help="wait for operator and brokers")
    timing.add_argument("--audit-timeout", type=float, default=300.0)
    timing.add_argument(
        "--grace-period", type=int, default=None, help="grace period of the pod deletion (default: the pod's)"
    )
    load = parser.add_argument_group("load and topology")
    load.add_argument("--rate", type=float, default=100.0, help="records/s per producer")
    load.add_argument("--fixed-producers", type=int, default=3)
    load.add_argument("--on-demand-producers", type=int, default=2)
    load.add_argument("--consumers", type=int, default=2)
    load.add_argument("--cms", type=int, default=1)
    load.add_argument("--mms", type=int, default=3)
    load.add_argument("--fixed", type=int, default=3, help="fixed partitions")
    load.add_argument("--replicas", type=int, default=2, help="copies of each fixed partition")
    return parser.parse_args(argv)


@dataclass
class Demo:
    args: argparse.Namespace
    state: DemoState
    timeline: Timeline
    tracker: FailoverTracker
    cluster: DemoCluster
    topology: Topology
    installer: Installer | None = None
    watcher: ClusterWatcher | None = None
    load: LoadRunner | None = None
    audit: AuditResult | None = None
    reasons: list[str] = field(default_factory=list)
    durations: dict[str, float] = field(default_factory=dict)
    out_dir: Path = Path()
    victim_partition: str = ""
    bootstrap: list[str] = field(default_factory=list)

    # ------------------------------------------------------------------------------- driving
    def step(self, name: str, fn: Callable[[], None], fatal: bool = True) -> bool:
        """Run one step; on StepFailed record the reason (and stop the demo if `fatal`)."""
        self.state.set_step(name)
        started = time.monotonic()
        try:
            fn()
            return True
        except StepFailed as exc:
            self.reasons.append(f"{name}: {exc}")
            self.state.emit(f"FAILED {name}: {exc}")
            if fatal:
                raise
            return False
        finally:
            self.durations[name] = time.monotonic() - started

    def run(self) -> None:
        try:
            self.step("cluster up", self.cluster_up)
            self.step("helm install", self.install_chart)
            self.step("BrokerCluster", self.brokercluster)
            self.step("load", self.start_load)
        except StepFailed:
            return
        self.step("failover", self.failover, fatal=False)
        self.step("stop load", self.stop_load, fatal=False)
        self.step("audit", self.run_audit, fatal=False)

    # --------------------------------------------------------------------------------- steps
    def cluster_up(self) -> None:
        try:
            self.cluster.up()
        except Exception as exc:
            raise StepFailed(f"the local cluster did not start: {exc}") from None
        self.state.emit(f"cluster marker={self.cluster.cluster.marker} KUBECONFIG={self.cluster.kubeconfig}")
        self.out_dir = self.cluster.directory / "demo"
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.watcher = ClusterWatcher(
            self.cluster.api_client(), NAMESPACE, self.cluster.node_name, self.state, self.tracker
        )
        self.watcher.start()

    def install_chart(self) -> None:
        self.installer = Installer(self.cluster, self.state, self.topology)
        try:
            self.installer.helm_install()
        except RuntimeError as exc:
            raise StepFailed(str(exc)) from None
        self.installer.wait_operator(timeout=self.args.install_timeout)

    def brokercluster(self) -> None:
        assert self.installer is not None
        try:
            self.installer.apply_brokercluster()
        except RuntimeError as exc:
            raise StepFailed(str(exc)) from None
        self.bootstrap = self.installer.wait_brokercluster(timeout=self.args.install_timeout)
        self.state.emit(f"CMs from the BrokerCluster status broker table: {', '.join(self.bootstrap)}")
        ca_file = self.installer.trust_cluster_ca(self.out_dir)
        self.state.emit(f"TLS: clients verify the CMs with the cluster CA ({ca_file})")
        user = self.installer.demo_user(LoadConfig.destination)
        # Admitted means the operator wrote the user to the CMs' users Secret; each CM reads it
        # within about a second. Log in once before the load starts, so the producers do not.
        wait_until(self.state, f"CMs accept BrokerUser {user}", lambda: _logs_in(self.bootstrap), 60)
        self.state.emit(
            f"clients log in as BrokerUser {user} (produce/consume {LoadConfig.destination} only)"
        )

    def start_load(self) -> None:
        a = self.args
        config = LoadConfig(
            bootstrap=self.bootstrap,
            out_dir=self.out_dir,
            fixed_producers=a.fixed_producers,
            on_demand_producers=a.on_demand_producers,
            consumers=a.consumers,
            rate=a.rate,
        )
        self.load = LoadRunner(config, self.state, self.tracker)
        self.load.start()
        load = self.load

        def acked() -> tuple[bool, str]:
            rows = self.state.snapshot().producers
            waiting = [p.name for p in rows if p.acked == 0]
            if load.failures:
                raise StepFailed("; ".join(load.failures))
            return not waiting, f"acked {load.acked_count()}, waiting for first ack: {waiting or '-'}"

        wait_until(self.state, "every producer acknowledged", acked, 30)
        deadline = time.monotonic() + self.args.warmup
        while time.monotonic() < deadline:
            self.state.set_progress(f"warming up ({deadline - time.monotonic():.0f}s left)")
            time.sleep(0.25)

    def _choose_victim(self) -> tuple[str, str]:
        per_partition: dict[str, int] = {}
        for p in self.state.snapshot().producers:
            if p.type == FIXED:
                per_partition[p.partition] = per_partition.get(p.partition, 0) + 1
        for name, _ in sorted(per_partition.items(), key=lambda kv: (-kv[1], kv[0])):
            row = self.state.partition(name)
            if row is not None and row.primary:
                return name, row.primary
        raise StepFailed(f"no fixed partition with producers has a primary ({per_partition})")

    def failover(self) -> None:
        assert self.watcher is not None
        partition, victim = self._choose_victim()
        self.victim_partition = partition
        uid = self.watcher.uid_of(victim)
        if uid is None:
            raise StepFailed(f"primary {victim} of {partition} is not a pod in namespace {NAMESPACE}")
        story = self.tracker.arm(victim, uid)
        row = self.state.partition(partition)
        self.tracker.mark_kill(
            f"kubectl delete pod {victim}: primary of fixed {', '.join(sorted(story.fixed))}"
            f" (epoch {row.epoch if row else '?'})"
            + (f" and of on-demand {', '.join(sorted(story.on_demand))}" if story.on_demand else "")
            + f"; producers hit: {', '.join(self.tracker.affected_producers()) or 'none'}"
        )
        core = client.CoreV1Api(self.cluster.api_client())
        kwargs: dict[str, Any] = {}
        if self.args.grace_period is not None:
            kwargs["grace_period_seconds"] = self.args.grace_period
        core.delete_namespaced_pod(victim, NAMESPACE, **kwargs)
        timeout = self.args.failover_timeout

        def updated() -> tuple[bool, str]:
            rows = [self.state.partition(n) for n in sorted(story.fixed)]
            text = ", ".join(f"{r.name} epoch {r.epoch} primary {r.primary or '-'}" for r in rows if r)
            return self.tracker.status_updated(), text

        wait_until(self.state, "Partition status updated (epoch+1, new primary)", updated, timeout)

        def resumed() -> tuple[bool, str]:
            waiting = [
                p.name
                for p in self.state.snapshot().producers
                if p.name in self.tracker.affected_producers() and p.status != "producing"
            ]
            return self.tracker.producers_resumed(), f"waiting for {waiting or 'acks'}"

        wait_until(self.state, "producers resumed", resumed, timeout)
        deadline = time.monotonic() + self.args.after
        while time.monotonic() < deadline:
            self.state.set_progress(f"load after the failover ({deadline - time.monotonic():.0f}s left)")
            time.sleep(0.25)

    def stop_load(self) -> None:
        load = self.load
        assert load is not None
        load.stop_producers()
        self.state.emit(f"producers stopped: {load.acked_count()} records acknowledged")
        failures: list[str] = []
        try:
            wait_until(
                self.state,
                "consumers received every acknowledged record",
                lambda: (load.unconsumed() == 0, f"{load.unconsumed()} not received yet"),
                self.args.drain_timeout,
            )
        except StepFailed as exc:
            failures.append(str(exc))
        if self.tracker.victim_on_demand():
            # Consumers keep reading meanwhile (draining needs them). A timeout here is reported by
            # the story's missing milestones, not twice.
            try:
                wait_until(
                    self.state,
                    "on-demand partition drained and garbage collected",
                    lambda: (self.tracker.on_demand_done(), "; ".join(self.tracker.missing()[-1:])),
                    self.args.drain_timeout,
                )
            except StepFailed as exc:
                self.state.emit(f"not seen: {exc}")
        load.stop()
        if failures:
            raise StepFailed("; ".join(failures))

    def run_audit(self) -> None:
        load = self.load
        assert load is not None
        records = load.consumed_records()
        export_dir = self.out_dir / "consumed"
        summary = export_consumed(records, dict(self.state.partition_types), export_dir)
        self.state.emit(
            f"exported {summary.records} consumed records of {summary.partitions} partitions to {export_dir}"
            f" ({summary.redelivered} redeliveries of the same record folded; all received: {export_dir}.csv)"
        )
        if summary.duplicates:
            shown = "; ".join(summary.duplicates[:3])
            self.state.emit(f"records stored twice ({len(summary.duplicates)}), e.g. {shown}")
        if summary.conflicts:
            counts = ", ".join(f"{p}: {n}" for p, n in sorted(summary.conflicts.items()))
            self.reasons.append(
                f"consumers received different records at the same partition:offset ({counts};"
                f" e.g. {'; '.join(summary.samples[:2])}): offsets were reused across the failover"
            )
            self.state.emit(f"CONFLICT {self.reasons[-1]}")
        self.audit = run_audit(
            self.state,
            export_dir,
            load.sendlog_dir,
            self.out_dir / "audit-report.json",
            self.args.audit_timeout,
        )

    # ------------------------------------------------------------------------------ teardown
    def teardown(self) -> None:
        self.state.set_step("teardown")
        if self.load is not None:
            self.load.stop()
        if self.watcher is not None:
            self.watcher.stop()
        if self.args.keep and self.cluster.started:
            self.state.emit(
                f"--keep: cluster left running; KUBECONFIG={self.cluster.kubeconfig};"
                f" stop it with: python -m localcluster down --dir {self.cluster.directory}"
            )
            return
        try:
            self.cluster.down()
        except Exception as exc:
            self.reasons.append(f"teardown: {exc}")
        left = self.cluster.leftover_processes() if self.cluster.cluster.marker else []
        if left:
            self.reasons.append(f"teardown: cluster processes left running: {left}")
        else:
            self.state.emit("no cluster process left")

    # ------------------------------------------------------------------------------- verdict
    def verdict(self) -> str:
        reasons = list(self.reasons)
        if self.load is not None:
            reasons += [f"load: {f}" for f in self.load.failures]
            missing = self.tracker.missing()
            if missing:
                reasons.append("failover story incomplete: " + "; ".join(missing))
        audit = self.audit
        if audit is not None and not audit.passed:
            reasons.append("audit: " + audit.verdict.removeprefix("verdict="))
        total = sum(self.durations.values())
        tail = f"failover: {self.tracker.summary()} demo_s={total:.0f}"
        if not reasons and audit is not None:
            return f"{audit.verdict} | {tail}"
        if not reasons:
            reasons.append("the audit did not run")
        return "verdict=FAIL " + " | ".join(dict.fromkeys(reasons)) + f" | {tail}"


def _interrupt_on_sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    # A CI timeout or `kill` ends the demo like Ctrl-C does: through the teardown.
    signal.signal(signal.SIGTERM, _interrupt_on_sigterm)
    state = DemoState()
    timeline = Timeline(state)
    tracker = FailoverTracker(state, timeline)
    topology = Topology(
        cms=args.cms, mms=args.mms, fixed=args.fixed, fixed_replicas=args.replicas, on_demand_per_mm=1
    )
    demo = Demo(args, state, timeline, tracker, DemoCluster(args.dir, state), topology)
    headless = args.headless or not sys.stdout.isatty()
    view: View = HeadlessView(state, timeline) if headless else LiveView(state, timeline)
    view.start()
    interrupted = False
    try:
        demo.run()
    except KeyboardInterrupt:
        interrupted = True
        demo.reasons.append("interrupted")
    finally:
        try:
            demo.teardown()
        except KeyboardInterrupt:
            demo.reasons.append("interrupted during teardown")
        view.stop()
    view.print("")
    view.print("step durations: " + ", ".join(f"{k} {v:.1f}s" for k, v in demo.durations.items()))
    if demo.audit is not None:
        view.print(f"audit report: {demo.audit.report}")
    view.print("failover timeline (seconds relative to the kill):")
    for line in timeline_lines(timeline) or ["  (none)"]:
        view.print(f"  {line}")
    verdict = demo.verdict()
    view.print(verdict)
    return 0 if verdict.startswith("verdict=PASS") and not interrupted else 1


def _logs_in(bootstrap: list[str]) -> tuple[bool, str]:
    """Whether a client logs in with this process's user and TLS settings (env)."""
    from hybridmq.client.connection import connect

    async def attempt() -> None:
        conn, _ = await connect(bootstrap)
        conn.close()

    try:
        asyncio.run(attempt())
    except Exception as exc:  # an authentication refusal until the CMs have read the user
        return False, str(exc)
    return True, "logged in"
