"""Benchmark: reading an exported log through ``spark.read.format("hybridmq")`` against pyarrow alone.

    .venv/bin/python bench/read.py [--records 10000000] [--dir /tmp/hybridmq-bench-read] [--repeat 3]

Generates (untimed) the same exported log as ``bench/audit.py``, then times, alternating, medians of
``--repeat`` runs:

* ``spark_count_s``: ``spark.read.format("hybridmq").option("path", …).load().count()``
* ``pyarrow_s``: pyarrow reading every segment file whole and decoding its dictionary columns
* ``spark_select_s``: a selective query, ``load().where("sequence < 1000").select("producer_id",
  "sequence").count()``, against ``pyarrow_select_s``: pyarrow reading those two columns and filtering
* ``spark_columns_s``: the selective query with the ``columns`` option naming just those two columns

The Python Data Source API gives the source no column pruning (the JVM asks every column of every
row), so the ``columns`` option is the way to read less. Appends a JSON line to
``bench/results/read.jsonl``; the output ends with ``records=… spark_count_s=… pyarrow_s=… ratio=…``
(ratio = spark_count_s / pyarrow_s).
"""

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parent))
from audit import finish, generate

RESULTS = Path(__file__).resolve().parent / "results" / "read.jsonl"
SELECT = ("producer_id", "sequence")


def segment_files(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("*/*.arrow"))


def pyarrow_count(root: Path) -> int:
    rows = 0
    for path in segment_files(root):
        with pa.memory_map(str(path), "r") as source:
            table = pa.ipc.open_file(source).read_all()
        columns = [c.cast(c.type.value_type) if pa.types.is_dictionary(c.type) else c for c in table.columns]
        rows += pa.table(columns, names=table.column_names).num_rows
    return rows


def pyarrow_select(root: Path) -> int:
    rows = 0
    for path in segment_files(root):
        with pa.memory_map(str(path), "r") as source:
            reader = pa.ipc.open_file(source)
            batches = [reader.get_batch(i).select(list(SELECT)) for i in range(reader.num_record_batches)]
        table = pa.Table.from_batches(batches)
        table = table.filter(pc.less(table.column("sequence"), 1000))
        rows += table.set_column(0, "producer_id", table.column(0).cast(pa.string())).num_rows
    return rows


def timed(fn: Callable[[], int]) -> tuple[float, int]:
    began = time.perf_counter()
    result = fn()
    return time.perf_counter() - began, result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--dir", default="/tmp/hybridmq-bench-read")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="keep the generated exported log")
    parser.add_argument("--reuse", action="store_true", help="reuse an existing generated log")
    args = parser.parse_args()
    root = Path(args.dir)
    if not (args.reuse and root.exists()):
        generate(root, args.records)

    from hybridmq.spark.session import build_session

    load_before = os.getloadavg()[0]
    spark = build_session(
        master=args.master, app_name="hybridmq-bench-read", extra={"spark.driver.memory": "2g"}
    )

    def spark_count() -> int:
        return spark.read.format("hybridmq").option("path", str(root)).load().count()

    def spark_select(columns_option: bool = False) -> int:
        reader = spark.read.format("hybridmq").option("path", str(root))
        if columns_option:
            reader = reader.option("columns", ",".join(SELECT))
        return reader.load().where("sequence < 1000").select(*SELECT).count()

    runs: dict[str, list[float]] = {
        k: [] for k in ("spark_count", "pyarrow", "spark_select", "pyarrow_select")
    }
    runs["spark_columns"] = []
    try:
        spark_select(columns_option=True)  # start the Python workers before timing
        for i in range(args.repeat):
            counts = {}
            for name, fn in (
                ("spark_count", spark_count),
                ("pyarrow", lambda: pyarrow_count(root)),
                ("spark_select", spark_select),
                ("spark_columns", lambda: spark_select(columns_option=True)),
                ("pyarrow_select", lambda: pyarrow_select(root)),
            ):
                seconds, counts[name] = timed(fn)
                runs[name].append(seconds)
            print(f"run {i}: " + " ".join(f"{k}={v[-1]:.2f}s" for k, v in runs.items()), counts, flush=True)
            agree = counts["spark_count"] == counts["pyarrow"] and (
                counts["spark_select"] == counts["spark_columns"] == counts["pyarrow_select"]
            )
            if not agree:
                print(f"MISMATCH: {counts}", file=sys.stderr)
                return 1
    finally:
        spark.stop()
    med = {k: statistics.median(v) for k, v in runs.items()}
    ratio = med["spark_count"] / med["pyarrow"]
    select_ratio = med["spark_select"] / med["pyarrow_select"]
    columns_ratio = med["spark_columns"] / med["pyarrow_select"]
    line = {
        "bench": "read",
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
        "records": counts["pyarrow"],
        **{f"{k}_s": round(v, 3) for k, v in med.items()},
        **{f"{k}_runs": [round(x, 3) for x in v] for k, v in runs.items()},
        "ratio": round(ratio, 2),
        "select_ratio": round(select_ratio, 2),
        "columns_ratio": round(columns_ratio, 2),
    }
    finish(RESULTS, line, args, load_before)
    print(
        f"records={counts['pyarrow']} spark_select_s={med['spark_select']:.2f}"
        f" pyarrow_select_s={med['pyarrow_select']:.2f} select_ratio={select_ratio:.2f}"
        f" spark_columns_s={med['spark_columns']:.2f} columns_ratio={columns_ratio:.2f}"
        f" spark_count_s={med['spark_count']:.2f} pyarrow_s={med['pyarrow']:.2f} ratio={ratio:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
