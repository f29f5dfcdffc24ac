"""The options of the ``hybridmq`` data source, parsed once (names are case-insensitive, as Spark's).

An option the source does not know is refused with the list of known ones (a misspelt
``startingOffset`` must not silently read from the default), and every bad value's error names its
option.

==============================  =====================================================================
``path``                        exported log directory (see :mod:`hybridmq.spark.exported`), or
``bootstrap``                   ``host:port`` of a connection manager of a running cluster
``username`` / ``password``     credentials for ``bootstrap``; ``timeout``: seconds per request (30)
``columns``                     comma-separated subset of the row columns (default: all but
                                ``headers``), in that order
``includeHeaders``              ``true``: add the ``headers`` column (default ``false``, as Kafka's)
``startingOffsets``             ``earliest`` (default) | ``latest`` | JSON ``{"partition": offset}``
                                (-2 earliest, -1 latest); partitions not named start at earliest.
                                Batch reads refuse ``latest`` (nothing would be read)
``startingOffsetsByTimestamp``  JSON ``{"partition": epoch milliseconds}``: start at the first record
                                stored at or after that time (the end if none); takes precedence
                                over ``startingOffsets`` for the partitions it names
``endingOffsets``               ``latest`` (default) | JSON; batch reads stop there, a stream never
                                reads past it (a bounded stream). Batch reads refuse ``earliest``
``maxOffsetsPerTrigger``        streaming: at most this many offsets per micro-batch, shared fairly
                                among partitions (``maxRecordsPerBatch`` is an older name for it)
``minOffsetsPerTrigger``        streaming: skip a trigger until this many offsets are available ...
``maxTriggerDelay``             ... or this long has passed since the last batch (``15m``; ``500ms``,
                                ``30s``, ``2m``, ``1h`` or plain milliseconds)
``offsetsPerSplit``             split a partition's range into Spark input partitions of this many
                                offsets (default: one input partition per broker partition and batch)
``failOnDataLoss``              ``true`` (default, as Kafka's): fail when data the query should read
                                is gone (a partition deleted with unread records, a trimmed range);
                                ``false``: skip it with a WARNING naming the lost offset range
``partitions``                  comma-separated partition names to read (default: all)
``partitionType``               ``fixed`` | ``on-demand``: read only partitions of this type
``readerName``                  streaming on a live cluster: commit each micro-batch's processed
                                offsets as this named reader's cursor (:mod:`hybridmq.spark.reader_cursor`),
                                so draining on-demand partitions are kept until it has read them
==============================  =====================================================================
"""

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from hybridmq.spark.offsets import EARLIEST, LATEST, parse_spec, parse_timestamps
from hybridmq.spark.schema import COLUMNS, parse_columns

# Options handed to open_source (the rest are reader behaviour).
SOURCE_KEYS = ("path", "bootstrap", "username", "password", "timeout", "readername")

KNOWN_OPTIONS: tuple[str, ...] = (
    "path",
    "bootstrap",
    "username",
    "password",
    "timeout",
    "columns",
    "includeHeaders",
    "startingOffsets",
    "startingOffsetsByTimestamp",
    "endingOffsets",
    "maxOffsetsPerTrigger",
    "maxRecordsPerBatch",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
    "offsetsPerSplit",
    "failOnDataLoss",
    "partitions",
    "partitionType",
    "readerName",
)
_CANONICAL = {name.lower(): name for name in KNOWN_OPTIONS}
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000
_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|min|h)?\s*$", re.IGNORECASE)
_UNIT_MS = {None: 1, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000}


def _bool(name: str, value: str | None, default: bool) -> bool:
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ValueError(f"option {name}: expected true or false, got {value!r}")


def _positive(name: str, value: str | None) -> int | None:
    if value is None or not value.strip():
        return None
    try:
        number = int(value.strip())
    except ValueError:
        raise ValueError(f"option {name}: expected a positive integer, got {value!r}") from None
    if number <= 0:
        raise ValueError(f"option {name}: expected a positive integer, got {value!r}")
    return number


def _seconds(name: str, value: str | None, default: float) -> float:
    if value is None or not value.strip():
        return default
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"option {name}: expected a number of seconds, got {value!r}") from None
    if not number > 0:
        raise ValueError(f"option {name}: expected a positive number of seconds, got {value!r}")
    return number


def _duration_ms(name: str, value: str | None, default: int) -> int:
    if value is None or not value.strip():
        return default
    match = _DURATION.match(value)
    if match is None:
        raise ValueError(f"option {name}: expected a duration such as 500ms, 30s, 15m or 1h, got {value!r}")
    unit = match.group(2).lower() if match.group(2) else None
    return int(match.group(1)) * _UNIT_MS[unit]


def _check_known(opts: Mapping[str, str]) -> None:
    unknown = sorted(k for k in opts if k not in _CANONICAL)
    if unknown:
        raise ValueError(
            f"unknown option(s) {unknown} for the hybridmq data source; known options (case-insensitive):"
            f" {', '.join(KNOWN_OPTIONS)}"
        )


def _columns(opts: Mapping[str, str]) -> tuple[str, ...]:
    include = opts.get("includeheaders")
    headers = _bool("includeHeaders", include, False)
    if opts.get("columns") is None or not opts["columns"].strip():
        return COLUMNS if headers else tuple(c for c in COLUMNS if c != "headers")
    try:
        columns = parse_columns(opts["columns"])
    except ValueError as err:
        raise ValueError(f"option columns: {err}") from None
    if include is not None and headers != ("headers" in columns):
        raise ValueError(
            f"option includeHeaders={include} contradicts option columns={opts['columns']!r}"
            " (give one of them)"
        )
    return columns


@dataclass(frozen=True)
class ReaderOptions:
    source: dict[str, str]
    columns: tuple[str, ...]
    starting: int | dict[str, int]
    ending: int | dict[str, int]
    max_records_per_batch: int | None
    offsets_per_split: int | None
    fail_on_data_loss: bool
    partitions: frozenset[str] | None = field(default=None)
    partition_type: str | None = field(default=None)
    starting_timestamps: dict[str, int] | None = field(default=None)
    min_offsets_per_trigger: int | None = field(default=None)
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> "ReaderOptions":
        opts = {str(k).lower(): str(v) for k, v in options.items()}
        _check_known(opts)
        names = opts.get("partitions")
        ptype = opts.get("partitiontype")
        if ptype is not None and ptype not in ("fixed", "on-demand"):
            raise ValueError(f"option partitionType: expected 'fixed' or 'on-demand', got {ptype!r}")
        if "maxoffsetspertrigger" in opts and "maxrecordsperbatch" in opts:
            raise ValueError(
                "give option maxOffsetsPerTrigger or its older name maxRecordsPerBatch, not both"
            )
        if "maxoffsetspertrigger" in opts:
            max_records = _positive("maxOffsetsPerTrigger", opts["maxoffsetspertrigger"])
        else:
            max_records = _positive("maxRecordsPerBatch", opts.get("maxrecordsperbatch"))
        min_records = _positive("minOffsetsPerTrigger", opts.get("minoffsetspertrigger"))
        if min_records is not None and max_records is not None and min_records > max_records:
            raise ValueError(
                f"option minOffsetsPerTrigger ({min_records}) is above maxOffsetsPerTrigger ({max_records})"
            )
        _seconds("timeout", opts.get("timeout"), 30.0)
        return cls(
            source={k: opts[k] for k in SOURCE_KEYS if k in opts},
            columns=_columns(opts),
            starting=parse_spec("startingOffsets", opts.get("startingoffsets"), EARLIEST),
            ending=parse_spec("endingOffsets", opts.get("endingoffsets"), LATEST),
            max_records_per_batch=max_records,
            offsets_per_split=_positive("offsetsPerSplit", opts.get("offsetspersplit")),
            fail_on_data_loss=_bool("failOnDataLoss", opts.get("failondataloss"), True),
            partitions=frozenset(n.strip() for n in names.split(",") if n.strip()) if names else None,
            partition_type=ptype,
            starting_timestamps=parse_timestamps(
                "startingOffsetsByTimestamp", opts.get("startingoffsetsbytimestamp")
            ),
            min_offsets_per_trigger=min_records,
            max_trigger_delay_ms=_duration_ms(
                "maxTriggerDelay", opts.get("maxtriggerdelay"), DEFAULT_MAX_TRIGGER_DELAY_MS
            ),
        )

    def wants(self, name: str, partition_type: str) -> bool:
        if self.partitions is not None and name not in self.partitions:
            return False
        return self.partition_type is None or partition_type == self.partition_type
