"""Benchmark: the Spark delivery audit against the same check on one machine, same data, same run.

    .venv/bin/python bench/audit.py [--records 10000000] [--dir /tmp/hybridmq-bench-audit]

Generates (untimed) an exported log of ``--records`` records: fixed partitions with interleaved
keyed producers and on-demand partitions whose producers move to another partition half-way (a
failover). Then times the Spark audit (``hybridmq.spark.audit.job.run_audit``), the plain-Python
baseline and the vectorized (numpy, one thread) baseline (both in ``hybridmq.spark.audit.baseline``)
``--repeat`` times each, alternating, checks that all agree and pass, and appends a JSON line to
``bench/results/audit.jsonl``. Start-up is timed apart: the SparkSession, and a 16k-record audit that
starts the Python workers. The output ends with ``records=… spark_s=… baseline_s=… ratio=…
vectorized_s=… spark_vs_vectorized=…`` (medians; ratio = baseline_s / spark_s, spark_vs_vectorized =
vectorized_s / spark_s: 1.0 means Spark on all cores is as fast as the best single-thread run).
"""

import argparse
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import _results  # bench/, the script's directory
import numpy as np
import pyarrow as pa

from hybridmq.spark.export import ExportWriter

SEGMENT_RECORDS = 1_000_000


def interleave(rng: np.random.Generator, producers: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` slots, each given to a random producer; returns (producer index, per-producer rank)."""
    who = rng.integers(0, len(producers), n)
    order = np.argsort(who, kind="stable")
    counts = np.bincount(who, minlength=len(producers))
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n) - np.repeat(starts, counts)
    return who, rank


def write_partition(
    writer: ExportWriter,
    name: str,
    ptype: str,
    producer_ids: list[str],
    who: np.ndarray,
    seq: np.ndarray,
    rng: np.random.Generator,
) -> None:
    names = pa.array(producer_ids, pa.string())
    t0 = 1_780_000_000_000_000
    for lo in range(0, len(who), SEGMENT_RECORDS):
        hi = min(lo + SEGMENT_RECORDS, len(who))
        n = hi - lo
        values = rng.integers(0, 256, size=n * 32, dtype=np.uint8)
        value = pa.BinaryArray.from_buffers(
            pa.binary(),
            n,
            [None, pa.py_buffer(np.arange(0, (n + 1) * 32, 32, dtype=np.int32)), pa.py_buffer(values)],
        )
        table = pa.table(
            {
                "destination": pa.DictionaryArray.from_arrays(
                    pa.array(np.zeros(n, np.int32)), pa.array(["orders"])
                ).dictionary_decode(),
                "producer_id": pa.DictionaryArray.from_arrays(
                    pa.array(who[lo:hi].astype(np.int32)), names
                ).dictionary_decode(),
                "sequence": pa.array(seq[lo:hi], pa.int64()),
                "timestamp": pa.array(
                    t0 + np.arange(lo, hi, dtype=np.int64) * 10, pa.timestamp("us", tz="UTC")
                ),
                "value": value,
            }
        )
        writer.append_table(name, ptype, table)


def generate(root: Path, records: int, seed: int = 7) -> dict[str, int]:
    """4 fixed partitions x 8 producers, 4 on-demand partitions x 8 producers that fail over."""
    rng = np.random.default_rng(seed)
    if root.exists():
        shutil.rmtree(root)
    writer = ExportWriter(root)
    per_partition = records // 8
    for p in range(4):
        ids = [f"fixed-producer-{p}-{i}" for i in range(8)]
        who, rank = interleave(rng, np.arange(8), per_partition)
        write_partition(writer, f"fixed-{p}", "fixed", ids, who, rank, rng)
    # On-demand: producer group g writes its first half to od-g and its second half to od-(g+1)%4.
    halves: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for p in range(4):
        halves[p] = interleave(rng, np.arange(8), per_partition // 2)
    for p in range(4):
        first_who, first_rank = halves[p]
        prev = (p - 1) % 4
        second_who, second_rank = interleave(rng, np.arange(8), per_partition - per_partition // 2)
        first_counts = np.bincount(halves[prev][0], minlength=8)
        ids = [f"od-producer-{p}-{i}" for i in range(8)] + [f"od-producer-{prev}-{i}" for i in range(8)]
        who = np.concatenate((first_who, second_who + 8))
        seq = np.concatenate((first_rank, second_rank + first_counts[second_who]))
        write_partition(writer, f"od-{p}", "on-demand", ids, who, seq, rng)
    return {"records": 4 * per_partition + 4 * per_partition, "partitions": 8, "producers": 64}


def finish(
    name: str, line: dict[str, Any], summary: dict[str, Any], args: argparse.Namespace, load_before: float
) -> None:
    """Record ``line`` (``bench/_results.py``) and end with ``summary``; remove the generated log
    unless ``--keep``."""
    if not args.keep:
        shutil.rmtree(args.dir, ignore_errors=True)
    _results.append(name, {**line, "master": args.master}, summary, load_before, echo=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--dir", default="/tmp/hybridmq-bench-audit")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs of each (medians are reported)")
    parser.add_argument("--keep", action="store_true", help="keep the generated exported log")
    parser.add_argument("--reuse", action="store_true", help="reuse an existing generated log")
    parser.add_argument(
        "--datasource", action="store_true", help="also time the audit through spark.read.format('hybridmq')"
    )
    args = parser.parse_args()
    root = Path(args.dir)

    began = time.perf_counter()
    if args.reuse and root.exists():
        shape = {"records": args.records, "partitions": 8, "producers": 64}
    else:
        shape = generate(root, args.records)
    print(f"generated {shape['records']} records in {time.perf_counter() - began:.1f}s at {root}", flush=True)

    from hybridmq.spark.audit.baseline import baseline_audit, vectorized_audit
    from hybridmq.spark.audit.job import run_audit
    from hybridmq.spark.audit.report import build_report, verdict_line
    from hybridmq.spark.session import build_session

    load_before = _results.load_average()
    began = time.perf_counter()
    spark = build_session(
        master=args.master, app_name="hybridmq-bench-audit", extra={"spark.driver.memory": "4g"}
    )
    session_s = time.perf_counter() - began
    datasource_s = None
    warm = root.with_name(root.name + "-warmup")
    try:
        # Start-up, part 2: a 16k-record audit starts the Python workers (and their imports).
        began = time.perf_counter()
        generate(warm, 16_000)
        run_audit(spark, {"path": str(warm)}, first_sequence=0)
        warmup_s = time.perf_counter() - began
        shutil.rmtree(warm, ignore_errors=True)

        # Alternate the two so that both see the same (shared, noisy) machine; report medians.
        spark_runs: list[float] = []
        baseline_runs: list[float] = []
        vectorized_runs: list[float] = []
        for i in range(args.repeat):
            began = time.perf_counter()
            result = run_audit(spark, {"path": str(root)}, first_sequence=0)
            spark_runs.append(time.perf_counter() - began)
            report = build_report(result)
            print(f"run {i}: spark    {spark_runs[-1]:.2f}s  {verdict_line(report)}", flush=True)
            began = time.perf_counter()
            base = baseline_audit(str(root), first_sequence=0)
            baseline_runs.append(time.perf_counter() - began)
            print(f"run {i}: baseline {baseline_runs[-1]:.2f}s  {base}", flush=True)
            began = time.perf_counter()
            fast = vectorized_audit(str(root), first_sequence=0)
            vectorized_runs.append(time.perf_counter() - began)
            print(f"run {i}: vectorized {vectorized_runs[-1]:.2f}s  {fast}", flush=True)
        if args.datasource:
            began = time.perf_counter()
            run_audit(spark, {"path": str(root)}, first_sequence=0, via="datasource")
            datasource_s = time.perf_counter() - began
            print(f"spark via spark.read.format('hybridmq') + mapInArrow: {datasource_s:.2f}s", flush=True)
    finally:
        spark.stop()
    spark_s = statistics.median(spark_runs)
    baseline_s = statistics.median(baseline_runs)
    vectorized_s = statistics.median(vectorized_runs)
    print(f"start-up, apart: session {session_s:.2f}s, Python worker warm-up {warmup_s:.2f}s", flush=True)

    totals = report["totals"]
    keys = ("records", "missing", "duplicates", "order_violations")
    agree = all(totals[k] == base[k] == fast[k] for k in keys)
    if not agree or report["verdict"] != "PASS":
        print(f"MISMATCH or FAIL: spark={totals} baseline={base} vectorized={fast}", file=sys.stderr)
    ratio = baseline_s / spark_s
    versus = vectorized_s / spark_s
    line = {
        "records": totals["records"],
        "partitions": totals["partitions"],
        "producers": totals["producers"],
        "spark_s": round(spark_s, 3),
        "session_s": round(session_s, 3),
        "warmup_s": round(warmup_s, 3),
        "datasource_s": None if datasource_s is None else round(datasource_s, 3),
        "via": "ranges",
        "baseline_s": round(baseline_s, 3),
        "spark_runs": [round(x, 3) for x in spark_runs],
        "baseline_runs": [round(x, 3) for x in baseline_runs],
        "ratio": round(ratio, 2),
        "vectorized_s": round(vectorized_s, 3),
        "vectorized_runs": [round(x, 3) for x in vectorized_runs],
        "spark_vs_vectorized": round(versus, 2),
        "agree": agree,
        "verdict": report["verdict"],
    }
    summary = {
        "records": totals["records"],
        "spark_s": f"{spark_s:.2f}",
        "baseline_s": f"{baseline_s:.2f}",
        "ratio": f"{ratio:.2f}",
        "vectorized_s": f"{vectorized_s:.2f}",
        "spark_vs_vectorized": f"{versus:.2f}",
    }
    finish("audit", line, summary, args, load_before)
    return 0 if agree and report["verdict"] == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
