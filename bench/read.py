"""Benchmark: reading an exported log through Spark against pyarrow alone, in the same run.

    .venv/bin/python bench/read.py [--records 10000000] [--dir /tmp/hybridmq-bench-read] [--repeat 3]
                                   [--python-source]

Generates (untimed) the same exported log as ``bench/audit.py``, then times, alternating, medians of
``--repeat`` runs:

* ``spark_count_s``: ``spark.read.format("hybridmq-export").option("path", …).load().count()``
  (the JVM source: columnar, reads only the columns a query uses)
* ``pyarrow_s``: pyarrow reading every segment file whole and decoding its dictionary columns
* ``spark_selective_s``: a selective query, ``load().where("sequence < 1000").select("producer_id",
  "sequence").count()`` through ``hybridmq-export``, against ``pyarrow_selective_s``: pyarrow doing
  the same work for the same answer, reading the ``sequence`` column of every record batch (memory
  mapped), filtering and counting (it does not use the batches' min/max statistics, with which the
  scan skips the batches no row of which can match; the count is answered on the driver, no job)
* ``spark_rows_s``: the same selective query returning its rows, ``….select("producer_id",
  "sequence").toArrow()`` (a Spark job: tasks scan, the driver collects Arrow batches), against
  ``pyarrow_rows_s``: pyarrow reading those two columns of every record batch, filtering, decoding
  ``producer_id`` to strings; both answers are compared (rows and the sum of ``sequence``)
* ``spark_floor_s``: ``spark.range(0, 2, 1, 2).count()``, what any Spark query costs on the machine
  at that moment (planning and scheduling a job), the part of the ratios no source can remove
* with ``--python-source``, the Python source ``format("hybridmq")`` too: ``python_count_s``,
  ``python_selective_s`` and ``python_columns_s`` (the selective query with the ``columns`` option)

Appends a JSON line to ``bench/results/read.jsonl``; the output ends with ``records=…
spark_count_s=… pyarrow_s=… ratio=… spark_selective_s=… pyarrow_selective_s=… selective_ratio=…
spark_rows_s=… pyarrow_rows_s=… rows_ratio=… spark_floor_s=…`` (ratio = spark_count_s / pyarrow_s,
selective_ratio = spark_selective_s / pyarrow_selective_s, rows_ratio = spark_rows_s /
pyarrow_rows_s).
"""

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _results
from audit import finish, generate

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


def pyarrow_selective(root: Path) -> int:
    """The selective count: the ``sequence`` column of every batch, filtered, counted."""
    rows = 0
    for path in segment_files(root):
        with pa.memory_map(str(path), "r") as source:
            reader = pa.ipc.open_file(source)
            for i in range(reader.num_record_batches):
                sequence = reader.get_batch(i).column("sequence")
                rows += pc.sum(pc.less(sequence, 1000)).as_py() or 0
    return rows


def pyarrow_rows(root: Path) -> pa.Table:
    """The selective query's rows: both columns of every batch, filtered, ``producer_id`` decoded."""
    tables = []
    for path in segment_files(root):
        with pa.memory_map(str(path), "r") as source:
            reader = pa.ipc.open_file(source)
            batches = [reader.get_batch(i).select(list(SELECT)) for i in range(reader.num_record_batches)]
        table = pa.Table.from_batches(batches)
        table = table.filter(pc.less(table.column("sequence"), 1000))
        tables.append(table.set_column(0, "producer_id", table.column(0).cast(pa.string())))
    return pa.concat_tables(tables)


def answer(table: pa.Table) -> tuple[int, int]:
    """What both sides' rows must agree on: how many, and the sum of their sequences."""
    return table.num_rows, pc.sum(table.column("sequence")).as_py() or 0


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
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
    parser.add_argument(
        "--python-source", action="store_true", help="also time the Python source format('hybridmq')"
    )
    args = parser.parse_args()
    root = Path(args.dir)
    if not (args.reuse and root.exists()):
        generate(root, args.records)

    from hybridmq.spark.session import build_session

    load_before = _results.load_average()
    spark = build_session(
        master=args.master, app_name="hybridmq-bench-read", extra={"spark.driver.memory": "2g"}
    )

    def count(fmt: str) -> int:
        return spark.read.format(fmt).option("path", str(root)).load().count()

    def selected(fmt: str, columns_option: bool = False) -> Any:
        reader = spark.read.format(fmt).option("path", str(root))
        if columns_option:
            reader = reader.option("columns", ",".join(SELECT))
        return reader.load().where("sequence < 1000").select(*SELECT)

    def selective(fmt: str, columns_option: bool = False) -> int:
        return int(selected(fmt, columns_option).count())

    timings: dict[str, Callable[[], Any]] = {
        "spark_count": lambda: count("hybridmq-export"),
        "pyarrow": lambda: pyarrow_count(root),
        "spark_selective": lambda: selective("hybridmq-export"),
        "pyarrow_selective": lambda: pyarrow_selective(root),
        "spark_rows": lambda: answer(selected("hybridmq-export").toArrow()),
        "pyarrow_rows": lambda: answer(pyarrow_rows(root)),
        # What any Spark query costs here (planning, scheduling a job of one task per core): the floor
        "spark_floor": lambda: spark.range(0, 2, 1, 2).count(),
    }
    if args.python_source:
        timings["python_count"] = lambda: count("hybridmq")
        timings["python_selective"] = lambda: selective("hybridmq")
        timings["python_columns"] = lambda: selective("hybridmq", columns_option=True)
    runs: dict[str, list[float]] = {k: [] for k in timings}
    try:
        selective("hybridmq-export")  # warm the JVM's code before timing
        selected("hybridmq-export").toArrow()
        if args.python_source:
            selective("hybridmq", columns_option=True)  # start the Python workers before timing
        for i in range(args.repeat):
            counts = {}
            for name, fn in timings.items():
                seconds, counts[name] = timed(fn)
                runs[name].append(seconds)
            print(f"run {i}: " + " ".join(f"{k}={v[-1]:.2f}s" for k, v in runs.items()), counts, flush=True)
            totals = {counts[k] for k in counts if k.endswith("count") or k == "pyarrow"}
            matched = {counts[k] for k in counts if k.endswith(("selective", "columns"))}
            answers = {counts["spark_rows"], counts["pyarrow_rows"]}
            if (
                len(totals) != 1
                or len(matched) != 1
                or len(answers) != 1
                or counts["pyarrow_rows"][0] not in matched
            ):
                print(f"MISMATCH: {counts}", file=sys.stderr)
                return 1
    finally:
        spark.stop()
    med = {k: statistics.median(v) for k, v in runs.items()}
    ratio = med["spark_count"] / med["pyarrow"]
    selective_ratio = med["spark_selective"] / med["pyarrow_selective"]
    rows_ratio = med["spark_rows"] / med["pyarrow_rows"]
    line = {
        "source": "hybridmq-export",
        "records": counts["pyarrow"],
        **{f"{k}_s": round(v, 3) for k, v in med.items()},
        **{f"{k}_runs": [round(x, 3) for x in v] for k, v in runs.items()},
        "ratio": round(ratio, 2),
        "selective_ratio": round(selective_ratio, 2),
        "rows_ratio": round(rows_ratio, 2),
    }
    if args.python_source:
        line["python_ratio"] = round(med["python_count"] / med["pyarrow"], 2)
        line["python_selective_ratio"] = round(med["python_selective"] / med["pyarrow_selective"], 2)
        line["python_columns_ratio"] = round(med["python_columns"] / med["pyarrow_selective"], 2)
        print(
            f"python source: count {med['python_count']:.2f}s (ratio {line['python_ratio']}),"
            f" selective {med['python_selective']:.2f}s (ratio {line['python_selective_ratio']}),"
            f" with columns {med['python_columns']:.2f}s (ratio {line['python_columns_ratio']})"
        )
    summary = {
        "records": counts["pyarrow"],
        "spark_count_s": f"{med['spark_count']:.2f}",
        "pyarrow_s": f"{med['pyarrow']:.2f}",
        "ratio": f"{ratio:.2f}",
        "spark_selective_s": f"{med['spark_selective']:.2f}",
        "pyarrow_selective_s": f"{med['pyarrow_selective']:.2f}",
        "selective_ratio": f"{selective_ratio:.2f}",
        "spark_rows_s": f"{med['spark_rows']:.2f}",
        "pyarrow_rows_s": f"{med['pyarrow_rows']:.2f}",
        "rows_ratio": f"{rows_ratio:.2f}",
        "spark_floor_s": f"{med['spark_floor']:.2f}",
    }
    finish("read", line, summary, args, load_before)
    return 0


if __name__ == "__main__":
    sys.exit(main())
