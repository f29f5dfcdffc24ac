"""Destination matchers for exact, glob (fnmatch) and regex subscriptions.

A matcher is applied to the canonical destination ``kind:name``; patterns are canonicalised the same
way, so ``orders.*`` (glob) matches topics ``orders.eu`` and ``orders.us`` including ones created
after the subscription. A regex must match the whole name (``re.fullmatch``).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable
from functools import lru_cache

from hybridmq.api.frames import split_kind

Matcher = Callable[[str], bool]
MATCH_KINDS = ("exact", "glob", "regex")


def make_matcher(pattern: str, mode: str = "exact") -> Matcher:
    kind, name = split_kind(pattern)
    prefix = kind + ":"
    if mode == "exact":
        full = prefix + name
        return full.__eq__
    if mode == "glob":
        rx = re.compile(fnmatch.translate(name))
    elif mode == "regex":
        rx = re.compile(name)
    else:
        raise ValueError(f"unknown match mode {mode!r}")

    @lru_cache(maxsize=4096)
    def match(dest: str) -> bool:
        return dest.startswith(prefix) and rx.fullmatch(dest[len(prefix) :]) is not None

    return match
