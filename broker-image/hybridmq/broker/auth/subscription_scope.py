"""Can a wildcard subscription reach any destination its user may consume?

Decided without enumerating destinations: the subscription pattern (a ``regex``, or a ``glob``
turned into one with ``fnmatch.translate``, over the name after the ``kind:`` prefix) is walked over
its parse tree while tracking which positions of a granted glob (over the whole canonical name)
some matching name can reach. The pattern can reach the grant when the glob's end is reachable.

Exact for literals, ``.``, ``?``/``*`` and classes against glob literals; everything it cannot
model exactly (lookarounds, back-references, case-insensitive classes, categories against glob
classes, a step budget for huge repeats) is over-approximated, so a refusal is always right: a
refused pattern matches no granted destination. The MMs still apply the grants to each
destination a pattern matches (``destinations/matching.py``).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable
from re import _constants as sre  # type: ignore[attr-defined]
from re import _parser as sre_parse  # type: ignore[attr-defined]
from typing import Any

from hybridmq.api.frames import split_kind

BUDGET = 20_000  # tree steps per check; past it the answer is "may reach"
_CATEGORY_RX = {
    sre.CATEGORY_DIGIT: r"\d",
    sre.CATEGORY_NOT_DIGIT: r"\D",
    sre.CATEGORY_SPACE: r"\s",
    sre.CATEGORY_NOT_SPACE: r"\S",
    sre.CATEGORY_WORD: r"\w",
    sre.CATEGORY_NOT_WORD: r"\W",
}


class _Unsure(Exception):
    """Something not modelled: answer conservatively."""


def _glob_tokens(glob: str) -> list[str]:
    """``*``, ``?``, a ``[...]`` class or one literal character, as fnmatch reads them."""
    tokens: list[str] = []
    i = 0
    while i < len(glob):
        ch = glob[i]
        if ch == "[":
            j = i + 1
            if j < len(glob) and glob[j] == "!":
                j += 1
            if j < len(glob) and glob[j] == "]":
                j += 1
            j = glob.find("]", j)
            if j != -1:
                tokens.append(glob[i : j + 1])
                i = j + 1
                continue
        tokens.append(ch)
        i += 1
    return tokens


class _Walker:
    def __init__(self, glob: str, ignore_case: bool) -> None:
        self.tokens = _glob_tokens(glob)
        self.end = len(self.tokens)
        self.ignore_case = ignore_case
        self.budget = BUDGET

    def close(self, states: frozenset[int]) -> frozenset[int]:
        """A ``*`` may match nothing: from its position the next one is reachable too."""
        out = set(states)
        for i in sorted(states):
            while i < self.end and self.tokens[i] == "*":
                i += 1
                out.add(i)
        return frozenset(out)

    def _token_accepts(self, token: str, atom: tuple[Any, Any]) -> bool:
        if token in ("*", "?"):
            return True  # any character; a regex atom is assumed non-empty
        op, arg = atom
        if op == sre.LITERAL:
            chars = {chr(arg), chr(arg).lower(), chr(arg).upper()} if self.ignore_case else {chr(arg)}
            return any(fnmatch.fnmatchcase(c, token) for c in chars)
        if len(token) == 1:  # a literal glob character against a class, ANY, NOT_LITERAL
            return self._atom_has(atom, token)
        return True  # class against class: not modelled, assume they share a character

    def _atom_has(self, atom: tuple[Any, Any], ch: str) -> bool:
        op, arg = atom
        if self.ignore_case and op != sre.ANY:
            return True
        if op == sre.ANY:
            return True
        if op == sre.NOT_LITERAL:
            return ord(ch) != arg
        if op == sre.IN:
            negate = bool(arg) and arg[0][0] == sre.NEGATE
            hit = False
            for item_op, item in arg[1:] if negate else arg:
                if item_op == sre.LITERAL:
                    hit = hit or ord(ch) == item
                elif item_op == sre.RANGE:
                    hit = hit or item[0] <= ord(ch) <= item[1]
                elif item_op == sre.CATEGORY and item in _CATEGORY_RX:
                    hit = hit or re.fullmatch(_CATEGORY_RX[item], ch) is not None
                else:
                    raise _Unsure(item_op)
            return hit != negate
        raise _Unsure(op)

    def _char(self, states: frozenset[int], atom: tuple[Any, Any]) -> frozenset[int]:
        out: set[int] = set()
        for i in states:
            if i < self.end and self._token_accepts(self.tokens[i], atom):
                out.add(i if self.tokens[i] == "*" else i + 1)
        return self.close(frozenset(out))

    def _anything(self, states: frozenset[int]) -> frozenset[int]:
        """Every position reachable by some string (back-references and the like)."""
        out = set(states)
        frontier = set(states)
        while frontier:
            nxt = {i + 1 for i in frontier if i < self.end} - out
            out |= nxt
            frontier = nxt
        return frozenset(out)

    def seq(self, items: Iterable[tuple[Any, Any]], states: frozenset[int]) -> frozenset[int]:
        for op, arg in items:
            if not states:
                return states
            self.budget -= 1
            if self.budget < 0:
                raise _Unsure("budget")
            if op in (sre.LITERAL, sre.NOT_LITERAL, sre.ANY, sre.IN):
                states = self._char(states, (op, arg))
            elif op == sre.SUBPATTERN:
                states = self.seq(arg[-1], states)
            elif op == sre.ATOMIC_GROUP:
                states = self.seq(arg, states)
            elif op == sre.BRANCH:
                states = frozenset().union(*(self.seq(alt, states) for alt in arg[1]))
            elif op in (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT):
                states = self._repeat(arg, states)
            elif op in (sre.AT, sre.ASSERT, sre.ASSERT_NOT):
                pass  # anchors and lookarounds only narrow: ignoring them over-approximates
            elif op == sre.GROUPREF:
                states = self._anything(states)
            elif op == sre.GROUPREF_EXISTS:
                _, yes, no = arg
                states = self.seq(yes, states) | (self.seq(no, states) if no else states)
            else:
                raise _Unsure(op)
        return states

    def _repeat(self, arg: tuple[int, int, Any], states: frozenset[int]) -> frozenset[int]:
        low, high, body = arg
        for _ in range(low):
            if not states:
                return states
            nxt = self.seq(body, states)
            if nxt == states:
                return self._star(body, states)  # further copies change nothing
            states = nxt
        if high == sre.MAXREPEAT:
            return self._star(body, states)
        seen = states
        for _ in range(high - low):
            states = self.seq(body, states) | states
            if states == seen:
                break
            seen = states
        return states

    def _star(self, body: Any, states: frozenset[int]) -> frozenset[int]:
        while True:
            nxt = states | self.seq(body, states)
            if nxt == states:
                return states
            states = nxt


def _reaches(kind: str, name_regex: str, glob: str) -> bool:
    try:
        tree = sre_parse.parse(name_regex)
    except re.error:
        return False  # the CM refuses an invalid pattern before asking
    # Scoped flags ((?i:...)) are not tracked: any "i" flag makes the whole walk case-insensitive.
    ignore_case = bool(tree.state.flags & re.IGNORECASE) or ("(?" in name_regex and "i" in name_regex)
    walker = _Walker(glob, ignore_case)
    states = walker.close(frozenset({0}))
    for ch in f"{kind}:":
        states = walker._char(states, (sre.LITERAL, ord(ch)))
    try:
        return walker.end in walker.seq(tree, states)
    except (_Unsure, RecursionError):
        return True


def may_reach(pattern: str, mode: str, grants: Iterable[str]) -> bool:
    """False only when ``pattern`` (canonical) cannot match any destination one of ``grants`` matches."""
    kind, name = split_kind(pattern)
    if mode == "exact":
        return any(fnmatch.fnmatchcase(f"{kind}:{name}", g) for g in grants)
    rx = fnmatch.translate(name) if mode == "glob" else name
    return any(_reaches(kind, rx, g) for g in grants)
