"""Can a wildcard subscription reach any destination its user may consume?

A subscription pattern (``glob`` or ``regex`` over the name, after the ``kind:`` prefix) can only
match names that start with its *literal prefix* (the characters before its first operator). A
granted glob without wildcards is checked exactly against the pattern; a granted glob with
wildcards can only overlap the pattern when the two literal prefixes are compatible (one starts
with the other). This is sound for refusing (a pattern refused here matches no granted
destination) but not complete: a pattern like ``queue:(alice)\\..*`` is accepted, and the MMs'
per-destination restriction then keeps it from receiving anything.
"""

from __future__ import annotations

from collections.abc import Iterable

from hybridmq.api.frames import split_kind
from hybridmq.broker.destinations.matching import make_matcher

_GLOB_META = "*?["
_REGEX_META = ".^$*+?{}[]|()"
_QUANTIFIERS = "*?{"


def _glob_prefix(pattern: str) -> str:
    for i, ch in enumerate(pattern):
        if ch in _GLOB_META:
            return pattern[:i]
    return pattern


def _regex_prefix(pattern: str) -> str:
    if "|" in pattern:  # an alternative may start with anything
        return ""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            nxt = pattern[i + 1 : i + 2]
            if not nxt or nxt.isalnum():  # \d, \w, \A, \b ...: not a literal
                break
            out.append(nxt)
            i += 2
            continue
        if ch in _REGEX_META:
            if ch in _QUANTIFIERS and out:  # "ab?" may match "a": the last literal is optional
                out.pop()
            break
        out.append(ch)
        i += 1
    return "".join(out)


def literal_prefix(pattern: str, mode: str) -> str:
    """Every destination ``pattern`` (canonical, ``kind:...``) matches starts with this string."""
    kind, name = split_kind(pattern)
    if mode == "exact":
        return f"{kind}:{name}"
    return f"{kind}:" + (_glob_prefix(name) if mode == "glob" else _regex_prefix(name))


def may_reach(pattern: str, mode: str, grants: Iterable[str]) -> bool:
    """False only when ``pattern`` cannot match any destination matched by one of ``grants``."""
    matcher = make_matcher(pattern, mode)
    prefix = literal_prefix(pattern, mode)
    for grant in grants:
        if not any(ch in grant for ch in _GLOB_META):
            if matcher(grant):
                return True
            continue
        other = _glob_prefix(grant)
        if prefix.startswith(other) or other.startswith(prefix):
            return True
    return False
