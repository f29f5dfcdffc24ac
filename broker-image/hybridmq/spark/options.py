"""The options of the ``hybridmq`` data source, parsed once (keys are case-insensitive).

==========================  =========================================================================
``path``                    exported log directory (see :mod:`hybridmq.spark.exported`), or
``bootstrap``               ``host:port`` of a connection manager of a running cluster
``columns``                 comma-separated subset of the row columns (default: all), in that order
``startingOffsets``         ``earliest`` (default) | ``latest`` | JSON ``{"partition": offset}``
                            (-2 earliest, -1 latest); partitions not named start at earliest
``endingOffsets``           ``latest`` (default) | ``earliest`` | JSON; batch reads stop there, a
                            stream never reads past it (a bounded stream)
``maxRecordsPerBatch``      streaming admission control: at most this many offsets per micro-batch
``offsetsPerSplit``         split a partition's range into Spark input partitions of this many
                            offsets (default: one input partition per broker partition and batch)
``failOnDataLoss``          ``false`` (default): skip data that is gone (a garbage-collected
                            on-demand partition, a trimmed range) with a warning; ``true``: fail
``partitions``              comma-separated partition names to read (default: all)
``partitionType``           ``fixed`` | ``on-demand``: read only partitions of this type
``readerName``              streaming: commit each micro-batch's processed offsets as this named
                            reader's cursor (:mod:`hybridmq.spark.reader_cursor`), so draining
                            on-demand partitions are kept until it has read them
==========================  =========================================================================
"""

from collections.abc import Mapping
from dataclasses import dataclass, field

from hybridmq.spark.offsets import EARLIEST, LATEST, parse_spec
from hybridmq.spark.schema import parse_columns

# Options handed to open_source (the rest are reader behaviour).
SOURCE_KEYS = ("path", "bootstrap", "username", "password", "timeout", "readername")


def _bool(value: str | None, default: bool) -> bool:
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ValueError(f"expected true or false, got {value!r}")


def _positive(name: str, value: str | None) -> int | None:
    if value is None or not value.strip():
        return None
    number = int(value)
    if number <= 0:
        raise ValueError(f"{name} must be positive, got {value!r}")
    return number


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

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> "ReaderOptions":
        opts = {str(k).lower(): str(v) for k, v in options.items()}
        names = opts.get("partitions")
        ptype = opts.get("partitiontype")
        if ptype is not None and ptype not in ("fixed", "on-demand"):
            raise ValueError(f"partitionType must be 'fixed' or 'on-demand', got {ptype!r}")
        return cls(
            source={k: opts[k] for k in SOURCE_KEYS if k in opts},
            columns=parse_columns(opts.get("columns")),
            starting=parse_spec(opts.get("startingoffsets"), EARLIEST),
            ending=parse_spec(opts.get("endingoffsets"), LATEST),
            max_records_per_batch=_positive("maxRecordsPerBatch", opts.get("maxrecordsperbatch")),
            offsets_per_split=_positive("offsetsPerSplit", opts.get("offsetspersplit")),
            fail_on_data_loss=_bool(opts.get("failondataloss"), False),
            partitions=frozenset(n.strip() for n in names.split(",") if n.strip()) if names else None,
            partition_type=ptype,
        )

    def wants(self, name: str, partition_type: str) -> bool:
        if self.partitions is not None and name not in self.partitions:
            return False
        return self.partition_type is None or partition_type == self.partition_type
