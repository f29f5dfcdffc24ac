"""The row schema of the ``hybridmq`` data source, as a Spark DDL string and as an Arrow schema.

Both views must agree exactly: Spark refuses a ``read()`` batch whose Arrow types differ from the
declared schema (for example ``int64`` for an ``int`` field, or a timestamp without ``tz=UTC``).
Every field is nullable, as in a Spark DDL schema.
"""

from collections.abc import Sequence

import pyarrow as pa

from hybridmq.spark.headers import HEADERS_ARROW, HEADERS_DDL

COLUMNS: tuple[str, ...] = (
    "partition",
    "partition_type",
    "offset",
    "destination",
    "key",
    "producer_id",
    "sequence",
    "timestamp",
    "headers",
    "value",
)

_ARROW_TYPES: dict[str, pa.DataType] = {
    "partition": pa.string(),
    "partition_type": pa.string(),
    "offset": pa.int64(),
    "destination": pa.string(),
    "key": pa.binary(),
    "producer_id": pa.string(),
    "sequence": pa.int64(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "headers": HEADERS_ARROW,
    "value": pa.binary(),
}

_SPARK_TYPES: dict[str, str] = {
    "partition": "STRING",
    "partition_type": "STRING",
    "offset": "BIGINT",
    "destination": "STRING",
    "key": "BINARY",
    "producer_id": "STRING",
    "sequence": "BIGINT",
    "timestamp": "TIMESTAMP",
    "headers": HEADERS_DDL,
    "value": "BINARY",
}

ROW_SCHEMA: pa.Schema = pa.schema([pa.field(name, _ARROW_TYPES[name]) for name in COLUMNS])

# The columns the delivery audit needs; reading only these keeps the audit cheap.
AUDIT_COLUMNS: tuple[str, ...] = ("partition", "partition_type", "offset", "producer_id", "sequence")


def parse_columns(spec: str | None) -> tuple[str, ...]:
    """Parse the ``columns`` option (comma separated, any order); ``None`` or empty means all."""
    if not spec or not spec.strip():
        return COLUMNS
    names = tuple(part.strip() for part in spec.split(",") if part.strip())
    unknown = [name for name in names if name not in _ARROW_TYPES]
    if unknown:
        raise ValueError(f"unknown column(s) {unknown}; the row schema has {list(COLUMNS)}")
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate column in {list(names)}")
    return names


def arrow_schema(columns: Sequence[str] = COLUMNS) -> pa.Schema:
    return pa.schema([ROW_SCHEMA.field(name) for name in columns])


def spark_ddl(columns: Sequence[str] = COLUMNS) -> str:
    """The Spark DDL of ``columns``; backticks because ``partition``/``offset`` are SQL keywords."""
    return ", ".join(f"`{name}` {_SPARK_TYPES[name]}" for name in columns)
