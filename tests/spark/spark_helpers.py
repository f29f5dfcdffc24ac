"""Small exported logs for the Spark tests."""

from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa

from hybridmq.spark.export import ExportWriter


def rows_for(producer: str, sequences: Iterable[int], destination: str = "orders") -> list[dict[str, object]]:
    return [
        {
            "producer_id": producer,
            "sequence": seq,
            "destination": destination,
            "key": f"k{seq % 3}",
            "value": f"{producer}:{seq}".encode(),
            "headers": {"h": str(seq)},
            "timestamp": 1_780_000_000 + seq,
        }
        for seq in sequences
    ]


def interleaved(*streams: list[dict[str, object]]) -> list[dict[str, object]]:
    """Round-robin merge that keeps each stream's order (several producers on one partition)."""
    out: list[dict[str, object]] = []
    longest = max((len(s) for s in streams), default=0)
    for i in range(longest):
        out.extend(s[i] for s in streams if i < len(s))
    return out


def clean_log(root: Path) -> ExportWriter:
    """fixed-0: a (0..29) and b (0..19) interleaved; fixed-1: c (0..24); od-0 then od-1: d (0..9, 10..19)."""
    writer = ExportWriter(root)
    writer.append_rows("fixed-0", "fixed", interleaved(rows_for("a", range(30)), rows_for("b", range(20))))
    writer.append_rows("fixed-1", "fixed", rows_for("c", range(25)))
    writer.append_rows("od-0", "on-demand", rows_for("d", range(10)))
    writer.append_rows("od-1", "on-demand", rows_for("d", range(10, 20)))
    return writer


def old_headers_log(root: Path) -> Path:
    """Partition p with 2 records whose segment stores headers as an older export did:
    ``map<string, string>`` (first record ``{"h": "0"}``, second none). Returns the segment."""
    writer = ExportWriter(root)
    writer.append_rows("p", "fixed", rows_for("a", range(2)))
    (segment,) = (root / "p").glob("*.arrow")
    table = pa.ipc.open_file(pa.py_buffer(segment.read_bytes())).read_all()
    old_headers = pa.array([[("h", "0")], None], pa.map_(pa.string(), pa.string()))
    table = table.set_column(table.schema.get_field_index("headers"), "headers", old_headers)
    with pa.OSFile(str(segment), "wb") as sink, pa.ipc.new_file(sink, table.schema) as out:
        out.write_table(table)
    return segment
