"""Copies of JSON bodies that share their strings with every other copy.

The operator keeps a copy of each watched object (the indexes) and of each status it wrote (until
the watch has it), and the models parsed from them keep the same strings. Each body decoded from
JSON brings its own copy of every key and of the values that repeat across objects (the cluster's
name, label values, condition types and reasons, owner UIDs, MM names). At 10,000 Partitions these
repeats were most of the operator's memory. Interning them keeps one of each, process-wide;
CPython frees an interned string once nothing else refers to it.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

# Longer strings (a broker's report on its Lease) are seldom repeated: not worth hashing.
INTERN_MAX_CHARS = 256


def json_copy(value: Any) -> Any:
    """A deep copy of a JSON value (mappings, lists, scalars) whose keys and short strings are
    interned; nothing of the copy is shared with ``value`` but immutable scalars."""
    if type(value) is str:
        return sys.intern(value) if len(value) <= INTERN_MAX_CHARS else value
    if isinstance(value, Mapping):
        return {sys.intern(str(k)): json_copy(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_copy(v) for v in value]
    return value
