"""What an idle MM holding many partition copies costs, with replica fetches batched per peer and with
one fetch per partition (``HYBRIDMQ_REPLICA_FETCH=single``), in the same run.

For each mode: ``hybridmq local`` with its controller, 2 MMs, ``--partitions`` fixed partitions of
2 replicas (so each MM holds every partition: half as primary, half as backup, fetching from the
other MM), no clients. Once every partition is in sync and ``--settle`` seconds passed, each MM is
sampled for ``--idle`` seconds: CPU seconds used (as a percentage of one core), RSS and open file
descriptors at the end. The replication traffic of an idle cluster is what is left: the backups'
long polls.

Appends one JSON line to ``bench/results/replica_idle.jsonl``; the output ends with
``partitions=… cpu_pct_single=… cpu_pct_batch=… cpu_ratio=… rss_mb_single=… rss_mb_batch=…
fds_single=… fds_batch=…`` (per MM, the mean of the MMs).

    .venv/bin/python bench/replica_idle.py [--partitions 1000] [--idle 30]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from statistics import mean
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _results

from hybridmq.api.resources import BrokerClusterSpec
from hybridmq.local.runner import LocalCluster

MODES = ("single", "batch")


class _Patient(LocalCluster):
    """Many partitions take longer than the default start-up bound to be placed on a loaded machine."""

    def wait_in_sync(self, timeout: float = 400.0) -> None:
        super().wait_in_sync(timeout)


def measure(mode: str, partitions: int, settle: float, idle: float, lease_s: float) -> dict[str, Any]:
    os.environ["HYBRIDMQ_REPLICA_FETCH"] = mode  # inherited by the MM processes
    spec = BrokerClusterSpec.model_validate(
        {
            "partitions": {
                "fixed": {"count": partitions, "replicas": 2, "minInSync": 1},
                "onDemand": {"perMessageManager": 0},
            }
        }
    )
    with tempfile.TemporaryDirectory(prefix="hmq-replica-idle-") as tmp:
        started = time.monotonic()
        with _Patient(Path(tmp), mms=2, replicas=2, spec=spec, lease_s=lease_s) as cluster:
            in_sync_s = time.monotonic() - started
            time.sleep(settle)
            procs = {n: psutil.Process(cluster.procs[n].pid) for n in cluster.mm_names}
            cpu0 = _results.cpu_seconds(procs)
            time.sleep(idle)
            cpu1 = _results.cpu_seconds(procs)
            per_mm = {
                n: {
                    "cpu_pct": round(100 * (cpu1[n] - cpu0[n]) / idle, 1),
                    "rss_mb": round(p.memory_info().rss / 2**20, 1),
                    "fds": p.num_fds(),
                }
                for n, p in procs.items()
            }
    print(f"{mode}: in sync after {in_sync_s:.1f}s, per MM {per_mm}", flush=True)
    return {"in_sync_s": round(in_sync_s, 1), "mms": per_mm}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--settle", type=float, default=10.0, help="seconds after in sync, before sampling")
    parser.add_argument("--idle", type=float, default=30.0, help="seconds sampled")
    parser.add_argument("--lease", type=float, default=3.0, help="heartbeat lease seconds (a loaded machine)")
    args = parser.parse_args()
    load_before = _results.load_average()
    figures: dict[str, Any] = {"partitions": args.partitions, "idle_s": args.idle, "lease_s": args.lease}
    summary: dict[str, Any] = {"partitions": args.partitions}
    for mode in MODES:
        try:
            result = measure(mode, args.partitions, args.settle, args.idle, args.lease)
        except TimeoutError as exc:  # recorded: a mode that never got in sync is a finding too
            print(f"{mode}: {exc}", flush=True)
            figures[mode] = {"error": str(exc)}
            for key in ("cpu_pct", "rss_mb", "fds"):
                summary[f"{key}_{mode}"] = "n/a"
            continue
        figures[mode] = result
        for key in ("cpu_pct", "rss_mb", "fds"):
            summary[f"{key}_{mode}"] = round(mean(m[key] for m in result["mms"].values()), 1)
    batch, single = summary["cpu_pct_batch"], summary["cpu_pct_single"]
    summary["cpu_ratio"] = round(batch / single, 2) if single not in ("n/a", 0) and batch != "n/a" else "n/a"
    _results.append("replica_idle", figures, summary, load_before)
    return 0


if __name__ == "__main__":
    sys.exit(main())
