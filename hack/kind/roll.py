"""The kind demo's roll (FAILURE=roll): restart every broker pod through the operator, time the stalls.

    python3 roll.py run --context C --namespace NS --cluster BC
    python3 roll.py stalls --start-ms T --mms-done-ms M --end-ms E FILE...

``run`` sets the BrokerCluster's restart annotation (``hybridmq.io/restartedAt``, as ``kubectl
rollout restart`` does for a Deployment) and follows the roll: a line each time the ``Rolling``
condition or ``status.roll`` changes, then ``roll_start_ms``, ``mms_done_ms`` (every MM replaced and
Ready: the CMs roll after that) and ``roll_done_ms`` (``Rolling`` False with reason ``Done``) as
``key=value`` lines, all in unix milliseconds.

``stalls`` reads producer logs (``acked <n> <unix ms> <send ms>`` lines, hack/kind/load.py). A send
began at its acknowledgement's time minus its wait; each send is put in the phase it began in:
before the roll, the MMs' part of the roll, or the CMs' part. It prints ``max_stall_ms`` and
``p99_ms_during`` (the MMs' part), ``p99_ms_before``, ``max_stall_ms_cms`` and ``p99_ms_cms``.

Standard library only: the demo runs it with the host's python3.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROLL_TIMEOUT_S = 1200.0
RESTART_ANNOTATION = "hybridmq.io/restartedAt"


def kubectl(context: str, *args: str) -> str:
    command = ["kubectl", "--context", context, *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def rolling_condition(cluster: Mapping[str, Any]) -> dict[str, Any]:
    conditions = (cluster.get("status") or {}).get("conditions") or []
    return next((dict(c) for c in conditions if c.get("type") == "Rolling"), {})


def progress(cluster: Mapping[str, Any]) -> str:
    """One line of where the roll stands, as ``kubectl describe hbc`` shows it."""
    cond = rolling_condition(cluster)
    roll = (cluster.get("status") or {}).get("roll") or {}
    return (
        f"Rolling={cond.get('status', '?')} {cond.get('reason', '')}: {cond.get('message', '')}"
        f" | MMs {roll.get('messageManagersUpdated', '?')}/{roll.get('messageManagers', '?')}"
        f" CMs {roll.get('connectionManagersUpdated', '?')}/{roll.get('connectionManagers', '?')}"
        f" pod={roll.get('pod') or '-'}"
    )


def mms_done(cluster: Mapping[str, Any], mm_pods: Sequence[Mapping[str, Any]]) -> bool:
    """Every MM on the new revision and every MM pod Ready (the CMs' part of the roll begins)."""
    roll = (cluster.get("status") or {}).get("roll") or {}
    want = roll.get("messageManagers")
    return (
        want is not None
        and roll.get("messageManagersUpdated") == want
        and len(mm_pods) == want
        and all(_ready(p) for p in mm_pods)
    )


def _ready(pod: Mapping[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return pod.get("metadata", {}).get("deletionTimestamp") is None and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in conditions
    )


def run(args: argparse.Namespace) -> int:
    ns, name = args.namespace, args.cluster

    def get(*what: str) -> Any:
        return json.loads(kubectl(args.context, "-n", ns, "get", *what, "-o", "json"))

    start_ms = int(time.time() * 1000)
    kubectl(args.context, "-n", ns, "annotate", "--overwrite", f"brokercluster/{name}",
            f"{RESTART_ANNOTATION}={start_ms / 1000:.3f}")  # fmt: skip
    print(f"roll_start_ms={start_ms}", flush=True)
    deadline = time.monotonic() + args.timeout
    seen_rolling, mms_done_ms, last = False, None, ""
    while time.monotonic() < deadline:
        cluster = get(f"brokercluster/{name}")
        now_ms = int(time.time() * 1000)
        line = progress(cluster)
        if line != last:
            print(f"    +{(now_ms - start_ms) / 1000:6.1f} s  {line}", flush=True)
            last = line
        cond = rolling_condition(cluster)
        seen_rolling = seen_rolling or cond.get("status") == "True"
        if seen_rolling and mms_done_ms is None:
            mm_pods = get("pods", "-l", f"app.kubernetes.io/component=mm,app.kubernetes.io/instance={name}")
            if mms_done(cluster, mm_pods["items"]):
                mms_done_ms = now_ms
                print(f"mms_done_ms={mms_done_ms}", flush=True)
        if seen_rolling and cond.get("status") == "False" and cond.get("reason") == "Done":
            print(f"mms_done_ms={mms_done_ms or now_ms}", flush=True)
            print(f"roll_done_ms={now_ms}")
            print(f"roll_s={(now_ms - start_ms) / 1000:.1f}")
            return 0
        time.sleep(0.5)
    print(f"roll_done_ms=none (not done after {args.timeout:.0f} s: {last})")
    return 1


def sends(lines: Sequence[str]) -> list[tuple[float, float]]:
    """(began at, unix ms; waited, ms) of every acknowledged send in a producer's log."""
    out = []
    for line in lines:
        words = line.split()
        if len(words) == 4 and words[0] == "acked":
            waited = float(words[3])
            out.append((int(words[2]) - waited, waited))
    return out


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest rank (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def phase_figures(
    all_sends: Sequence[tuple[float, float]], start: float, mms_done: float, end: float
) -> dict[str, float]:
    before = [w for t, w in all_sends if t < start]
    during = [w for t, w in all_sends if start <= t < mms_done]
    cms = [w for t, w in all_sends if mms_done <= t < end]
    return {
        "max_stall_ms": round(max(during, default=0.0), 1),
        "p99_ms_during": round(percentile(during, 0.99), 1),
        "p99_ms_before": round(percentile(before, 0.99), 1),
        "max_stall_ms_cms": round(max(cms, default=0.0), 1),
        "p99_ms_cms": round(percentile(cms, 0.99), 1),
        "sends_during": len(during),
        "sends_cms": len(cms),
    }


def stalls(args: argparse.Namespace) -> int:
    every: list[tuple[float, float]] = []
    for path in args.logs:
        mine = sends(Path(path).read_text().splitlines())
        during = [w for t, w in mine if args.start_ms <= t < args.mms_done_ms]
        longest = max(during, default=0.0)
        print(f"producer {Path(path).name}: {len(mine)} sends, longest in the MMs' roll {longest:.1f} ms")
        every += mine
    figures = phase_figures(every, args.start_ms, args.mms_done_ms, args.end_ms)
    print(" ".join(f"{k}={v}" for k, v in figures.items()))
    return 0 if figures["sends_during"] else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser("roll.py")
    sub = parser.add_subparsers(dest="command", required=True)
    rn = sub.add_parser("run")
    for flag in ("--context", "--namespace", "--cluster"):
        rn.add_argument(flag, required=True)
    rn.add_argument("--timeout", type=float, default=ROLL_TIMEOUT_S)
    st = sub.add_parser("stalls")
    for flag in ("--start-ms", "--mms-done-ms", "--end-ms"):
        st.add_argument(flag, type=int, required=True)
    st.add_argument("logs", nargs="+")
    args = parser.parse_args(argv)
    return {"run": run, "stalls": stalls}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
