"""Showing the demo: a rich Live layout in a terminal, or plain timestamped lines (--headless).

Both read the same `DemoState` and `Timeline`. The Live view redraws a few times a second:
header (step, progress, node), broker pods, partitions, load (rates and producers), the failover
timeline and the latest log lines. The headless view prints every `DemoState.emit` line as
``[HH:MM:SS +elapsed] ...``, the step's progress when it changes (at most every few seconds) and the
rates every few seconds while load runs, so a CI log tells the same story.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

from rich.console import Console, Group
from rich.layout import Layout
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from hybridmq_demo.state import DemoState, Snapshot
from hybridmq_demo.timeline import Event, Timeline

KIND_STYLE = {
    "kill": "bold red",
    "lost": "red",
    "status": "bold yellow",
    "resumed": "bold green",
    "drained": "cyan",
    "gc": "bold cyan",
    "error": "magenta",
    "info": "white",
}


def rates_line(snap: Snapshot) -> str:
    return (
        f"produce {snap.produce_rate:7.0f} msg/s (acked {snap.acked})   "
        f"consume {snap.consume_rate:7.0f} msg/s (received {snap.consumed})"
    )


def timeline_lines(timeline: Timeline, events: list[Event] | None = None) -> list[str]:
    return [f"{timeline.rel(e.at)}  {e.text}" for e in (events or timeline.snapshot())]


def short_pod(name: str, width: int = 26) -> str:
    """Long generated names (the operator's Deployment pod) keep their head and tail."""
    return name if len(name) <= width else f"{name[: width - 7]}…{name[-6:]}"


def pods_table(snap: Snapshot) -> Table:
    table = Table(expand=True, box=None, header_style="bold", pad_edge=False)
    table.add_column("pod", no_wrap=True, min_width=9)
    table.add_column("role", no_wrap=True, min_width=4)
    table.add_column("IP", no_wrap=True, min_width=11)
    table.add_column("ready", no_wrap=True, min_width=5)
    table.add_column("rst", no_wrap=True, min_width=3)
    table.add_column("status", no_wrap=True, overflow="ellipsis")
    for p in snap.pods:
        status = "Terminating" if p.deleting else p.phase
        if p.reason:
            status += f" ({p.reason})"
        style = "red" if p.deleting else ("green" if p.ready else "yellow")
        table.add_row(
            short_pod(p.name),
            p.role,
            p.ip or "-",
            Text("yes" if p.ready else "no", style=style),
            str(p.restarts),
            status,
        )
    return table


def partitions_table(snap: Snapshot) -> Table:
    table = Table(expand=True, box=None, header_style="bold", pad_edge=False)
    table.add_column("hpart", no_wrap=True, min_width=18)
    table.add_column("type", no_wrap=True, min_width=9)
    table.add_column("state", no_wrap=True, min_width=8)
    table.add_column("primary", no_wrap=True, min_width=9)
    table.add_column("epoch", no_wrap=True, min_width=5, justify="right")
    table.add_column("backlog", no_wrap=True, min_width=7, justify="right")
    table.add_column("in-sync", no_wrap=True, overflow="ellipsis", min_width=9)
    styles = {"Active": "green", "Migrating": "yellow", "Draining": "cyan", "Drained": "cyan"}
    for p in snap.partitions:
        table.add_row(
            p.name,
            p.type,
            Text(p.state + (" (deleting)" if p.deleting else ""), style=styles.get(p.state, "white")),
            p.primary or "-",
            str(p.epoch),
            str(p.backlog),
            ",".join(_member(n) for n in p.in_sync) or "-",
        )
    return table


def _member(pod: str) -> str:
    """'demo-mm-1' -> 'mm-1' (the in-sync column lists several)."""
    return "-".join(pod.rsplit("-", 2)[-2:])


def load_panel(snap: Snapshot) -> Group:
    table = Table(expand=True, box=None, header_style="bold")
    for col in ("producer", "type", "partition", "acked", "errors", "status"):
        table.add_column(col, no_wrap=True)
    now = time.monotonic()
    for p in snap.producers:
        status = p.status
        if status == "producing" and p.last_ack and now - p.last_ack > 1.0:
            status = f"stalled {now - p.last_ack:.1f}s"
        style = "green" if status == "producing" else ("red" if "FAIL" in status else "yellow")
        table.add_row(p.name, p.type, p.partition, str(p.acked), str(p.errors), Text(status, style=style))
    rates = (
        f"produce {snap.produce_rate:6.0f} msg/s  (acked {snap.acked})\n"
        f"consume {snap.consume_rate:6.0f} msg/s  (received {snap.consumed})"
    )
    return Group(Text(rates, style="bold"), table)


class LiveView:
    """The terminal view (rich Live); `stop()` leaves the last frame on screen."""

    def __init__(self, state: DemoState, timeline: Timeline, console: Console | None = None) -> None:
        self.state = state
        self.timeline = timeline
        self.console = console or Console()
        self._live: Live | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def render(self) -> Layout:
        snap = self.state.snapshot()
        layout = Layout()
        layout.split_column(
            Layout(name="head", size=3),
            Layout(name="top", ratio=3),
            Layout(name="mid", ratio=3),
            Layout(name="log", ratio=2),
        )
        head = Text.assemble(
            ("HybridMQ failover demo  ", "bold magenta"),
            (f"{snap.step}", "bold"),
            f"  {snap.step_elapsed:5.1f}s   total {snap.elapsed:5.0f}s   node {snap.node}\n",
            (snap.progress, "dim"),
        )
        layout["head"].update(Panel(head, padding=(0, 1)))
        layout["top"].split_row(
            Layout(Panel(pods_table(snap), title="broker pods"), ratio=4),
            Layout(Panel(partitions_table(snap), title="partitions (kubectl get hpart)"), ratio=5),
        )
        height = self.console.size.height
        mid_rows = max(3, (height - 3) * 3 // 8 - 2)  # the "mid" row's share, minus the borders
        layout["mid"].split_row(
            Layout(Panel(load_panel(snap), title="load"), ratio=2),
            Layout(Panel(self.timeline_table(mid_rows), title="failover timeline (t - kill)"), ratio=3),
        )
        rows = max(3, (height - 3) // 4 - 2)
        log = Text()
        for at, line in snap.log[-rows:]:
            log.append(f"{time.strftime('%H:%M:%S', time.localtime(time.time() - (time.monotonic() - at)))} ")
            log.append(line + "\n")
        layout["log"].update(Panel(log, title="log"))
        return layout

    def timeline_table(self, rows: int) -> Table | Text:
        """One line per event (the latest `rows` of them)."""
        events = self.timeline.snapshot()
        if not events:
            return Text("(no failover yet)", style="dim")
        table = Table(expand=True, box=None, show_header=False, pad_edge=False)
        table.add_column("t", no_wrap=True, style="dim", min_width=8, justify="right")
        table.add_column("event", no_wrap=True, overflow="ellipsis")
        for e in events[-rows:]:
            table.add_row(
                self.timeline.rel(e.at).strip(), Text(e.text, style=KIND_STYLE.get(e.kind, "white"))
            )
        return table

    def start(self) -> None:
        self._live = Live(self.render(), console=self.console, refresh_per_second=4, screen=False)
        self._live.start()
        self._thread = threading.Thread(target=self._run, name="view", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            if self._live is not None:
                self._live.update(self.render())

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2)
        if self._live is not None:
            self._live.update(self.render())
            self._live.stop()

    def print(self, line: str) -> None:
        self.console.print(line, markup=False, highlight=False, soft_wrap=True)


class HeadlessView:
    """Plain timestamped lines on stdout for CI logs."""

    def __init__(self, state: DemoState, timeline: Timeline, out: TextIO | None = None) -> None:
        self.state = state
        self.timeline = timeline
        self.out = out or sys.stdout
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.rates_every = 3.0
        self.progress_every = 5.0
        self._last_message = ""

    def _line(self, at: float, message: str) -> None:
        self._last_message = message
        wall = time.strftime("%H:%M:%S", time.localtime(time.time() - (time.monotonic() - at)))
        with self._lock:
            self.out.write(f"[{wall} +{at - self.state.started:6.1f}s] {message}\n")
            self.out.flush()

    def start(self) -> None:
        self.state.listeners.append(self._line)
        self._thread = threading.Thread(target=self._run, name="view", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        last_rates = last_progress_at = 0.0
        last_progress = ""
        while not self._stop.wait(0.5):
            snap = self.state.snapshot()
            now = time.monotonic()
            if (
                snap.progress
                and snap.progress != last_progress
                and now - last_progress_at >= self.progress_every
            ):
                self._line(now, f"... {snap.progress}")
                last_progress, last_progress_at = snap.progress, now
            running = any(p.status not in ("stopped", "FAILED") for p in snap.producers)
            if running and now - last_rates >= self.rates_every:
                self._line(now, rates_line(snap))
                last_rates = now

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2)
        if self._line in self.state.listeners:
            self.state.listeners.remove(self._line)

    def print(self, line: str) -> None:
        with self._lock:
            self.out.write(line + "\n")
            self.out.flush()


View = LiveView | HeadlessView
