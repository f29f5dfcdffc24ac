"""Record headers as Spark's Kafka source types them: ``ARRAY<STRUCT<key: STRING, value: BINARY>>``.

A producer's header values can be any msgpack value. They become bytes the way a Kafka client would
have sent them: bytes as they are, text as UTF-8, numbers and booleans as their JSON text (``5`` ->
``b"5"``, ``True`` -> ``b"true"``), lists and maps as JSON; ``None`` stays null.
"""

import json
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

HEADER_TYPE = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
HEADERS_ARROW = pa.list_(pa.field("element", HEADER_TYPE))
HEADERS_DDL = "ARRAY<STRUCT<key: STRING, value: BINARY>>"


def header_bytes(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        return value.encode()
    return json.dumps(value, default=_jsonable, separators=(",", ":")).encode()


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "backslashreplace")
    return str(value)


def header_key(key: Any) -> str:
    if isinstance(key, bytes | bytearray | memoryview):
        return bytes(key).decode("utf-8", "backslashreplace")
    return key if isinstance(key, str) else str(key)


def header_rows(headers: Mapping[Any, Any] | None) -> list[dict[str, Any]] | None:
    """A record's headers as the column's Python value (``None`` when it has none)."""
    if not headers:
        return None
    return [{"key": header_key(k), "value": header_bytes(v)} for k, v in headers.items()]


def from_string_map(column: pa.Array) -> pa.Array:
    """A ``map<string, string>`` column (exports written before headers were binary), converted."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    assert isinstance(column, pa.MapArray)
    entries = pa.StructArray.from_arrays(
        [column.keys, column.items.cast(pa.binary())], fields=list(HEADER_TYPE)
    )
    return pa.ListArray.from_arrays(column.offsets, entries, type=HEADERS_ARROW, mask=column.is_null())
