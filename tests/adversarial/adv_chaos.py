"""Seeded faults, one at a time: kill -9, SIGTERM, SIGSTOP/SIGCONT and restarts of MMs and CMs.

MMs and CMs are signalled and restarted through the cluster runner (``LocalCluster``, what
``hybridmq local`` runs; its controller's ``/kill`` and ``/start`` call the same methods). Each fault
is recorded as ``(start, end)``: from the signal until the cluster is whole again (the process back,
every partition in sync, every CM linked to every MM).

The thread that starts a process is its parent for ``PR_SET_PDEATHSIG``: this thread stays alive until
``release`` is set, after the run has read everything.
"""

from __future__ import annotations

import random
import signal
import threading
import time

from adv_checker import History

from hybridmq.local.runner import LocalCluster

ACTIONS = ("mm KILL", "mm TERM", "mm STOP", "cm KILL", "cm TERM", "cm STOP")


class Chaos(threading.Thread):
    def __init__(
        self,
        cluster: LocalCluster,
        rng: random.Random,
        history: History,
        quiet_s: tuple[float, float],
    ) -> None:
        super().__init__(name="adversarial-chaos", daemon=True)
        self.cluster = cluster
        self.rng = rng
        self.history = history
        self.quiet_s = quiet_s
        self.stop = threading.Event()
        self.finished = threading.Event()  # no fault in progress and none to come
        self.release = threading.Event()
        self.log: list[str] = []
        self.error: BaseException | None = None

    def _mm(self, name: str, sig: str) -> None:
        self.cluster.kill_mm(name, getattr(signal, f"SIG{sig}"))
        if sig == "STOP":
            time.sleep(self.rng.uniform(1.5, 3.0))  # past the 1 s lease: the partition fails over
            self.cluster.kill_mm(name, signal.SIGCONT)
        else:
            time.sleep(self.rng.uniform(0.3, 2.0))
            self.cluster.start_mm(name)
        self.cluster.wait_in_sync(timeout=90)
        self.cluster.wait_linked(timeout=60)

    def _cm(self, name: str, sig: str) -> None:
        self.cluster.kill_cm(name, getattr(signal, f"SIG{sig}"))
        if sig == "STOP":
            time.sleep(self.rng.uniform(1.0, 3.0))
            self.cluster.kill_cm(name, signal.SIGCONT)
        else:
            time.sleep(self.rng.uniform(0.3, 1.5))
            self.cluster.start_cm(name)
        self.cluster.wait_linked(timeout=60)

    def run(self) -> None:
        try:
            while not self.stop.wait(self.rng.uniform(*self.quiet_s)):
                kind, sig = self.rng.choice(ACTIONS).split()
                target = self.rng.choice(self.cluster.mm_names if kind == "mm" else self.cluster.cm_names)
                start = time.monotonic()
                try:
                    (self._mm if kind == "mm" else self._cm)(target, sig)
                finally:
                    end = time.monotonic()
                    self.history.faults.append((start, end))
                    self.log.append(f"{kind} {target} {sig}: {end - start:.1f}s")
        except BaseException as exc:  # reported by the test: the cluster did not come back
            self.error = exc
        finally:
            self.finished.set()
            self.release.wait()
