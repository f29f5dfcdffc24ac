"""An MM applies only the partitions whose assignment changed: after another MM is lost, every
table version (copies dropped, backups promoted, replacements added and caught up) reaches each
survivor, and the partitions that kept their assignment through all of it are not applied again.

3 MMs with the local controller, 9 fixed partitions of 2 copies; mm-2 is killed (SIGKILL). The test
reads the controller's table before and after, and each survivor's ``/admin`` figures: its
reconcile rounds (``_rounds``) and, per partition it holds, how many assignments of it it applied.
"""

from __future__ import annotations

import signal
from pathlib import Path

from hybridmq.local.runner import LocalCluster


def _applied(cluster: LocalCluster, mm: str) -> tuple[int, dict[str, int]]:
    replicas = cluster.mm_stats(mm)["replicas"]
    return int(replicas["_rounds"]), {
        n: int(e["applied"]) for n, e in replicas.items() if not n.startswith("_")
    }


def test_only_changed_partitions_are_applied_again(tmp_path: Path) -> None:
    with LocalCluster(tmp_path, mms=3, replicas=2, fixed=9, on_demand_per_mm=0) as cluster:
        cluster.wait_in_sync()
        before = cluster.table()
        counts = {mm: _applied(cluster, mm) for mm in ("mm-0", "mm-1")}
        cluster.kill_mm("mm-2", signal.SIGKILL)
        cluster.wait_until(
            lambda: all(
                "mm-2" not in a.replicas and set(a.in_sync) == set(a.replicas)
                for a in cluster.table().values()
            ),
            60,
            "every partition back to its copies in sync without mm-2",
        )
        after = cluster.table()
        kept = sorted(n for n, a in after.items() if before.get(n) == a)
        moved = sorted(n for n, a in after.items() if "mm-2" in before[n].replicas)
        assert kept and moved, (before, after)
        for mm, (rounds0, applied0) in counts.items():
            rounds1, applied1 = _applied(cluster, mm)
            assert rounds1 >= rounds0 + 2, (mm, rounds0, rounds1)  # several table versions came by
            for name in kept:
                if name in applied0:
                    assert applied1[name] == applied0[name], (mm, name, applied0[name], applied1[name])
            # What changed here was applied: each copy it holds of a moved partition, at least once more.
            for name in moved:
                if name in applied0 and name in applied1:
                    assert applied1[name] > applied0[name], (mm, name)
