"""Destination matchers for exact, glob (fnmatch) and regex subscriptions.

A matcher is applied to the canonical destination ``kind:name``; patterns are canonicalised the same
way, so ``orders.*`` (glob) matches topics ``orders.eu`` and ``orders.us`` including ones created
after the subscription. A regex must match the whole name (``re.fullmatch``).

``allow`` (the subscriber's consume grants, ACL globs over canonical names) narrows a matcher to
the destinations inside them: a wildcard subscription never matches one outside its user's grant.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Sequence
from functools import lru_cache

from hybridmq.api.frames import split_kind

Matcher = Callable[[str], bool]
MATCH_KINDS = ("exact", "glob", "regex")


def make_matcher(pattern: str, mode: str = "exact", allow: Sequence[str] | None = None) -> Matcher:
    matcher = _pattern_matcher(pattern, mode)
    if allow is None:
        return matcher
    grants = tuple(allow)

    @lru_cache(maxsize=4096)
    def restricted(dest: str) -> bool:
        return matcher(dest) and any(fnmatch.fnmatchcase(dest, g) for g in grants)

    return restricted


def _pattern_matcher(pattern: str, mode: str) -> Matcher:
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
