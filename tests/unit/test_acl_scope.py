"""ACL scope of wildcard subscriptions: grants narrow matchers; hopeless patterns are told apart."""

from __future__ import annotations

import fnmatch
import itertools
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from hybridmq.broker.auth import AclTable
from hybridmq.broker.auth.subscription_scope import may_reach
from hybridmq.broker.destinations.matching import make_matcher

BOB = ("queue:bob.*", "topic:news")


def test_grants_narrow_a_wildcard_to_granted_destinations() -> None:
    wide = make_matcher("queue:.*", "regex", BOB)
    assert wide("queue:bob.inbox")
    assert not wide("queue:alice.inbox")  # the pattern matches it, the grant does not
    assert not make_matcher("topic:*", "glob", BOB)("topic:payroll")
    assert make_matcher("topic:*", "glob", BOB)("topic:news")
    assert make_matcher("queue:.*", "regex")("queue:alice.inbox")  # no grants: no restriction


def test_acl_grants_combine_the_user_and_everyone() -> None:
    acl = AclTable({"bob": {"consume": ["queue:bob.*"]}, "*": {"consume": ["topic:public.*"]}})
    assert acl.grants("bob", "consume") == ("queue:bob.*", "topic:public.*")
    assert acl.grants("eve", "consume") == ("topic:public.*",)
    assert acl.grants("bob", "produce") == ()
    assert AclTable().grants("bob", "consume") is None


def test_may_reach_refuses_hopeless_patterns() -> None:
    for pattern, mode in [
        (r"queue:alice\..*", "regex"),
        ("queue:alice.*", "glob"),
        ("topic:n.*", "glob"),  # the exact grant topic:news is not matched
        (r"queue:(alice)\..*", "regex"),
        ("queue:(alice|carol).*", "regex"),
        ("queue:[a-c]o[^b].*", "regex"),  # bob.* needs "bob": the third letter must be b
        (r"queue:\d+", "regex"),
        ("topic:bob.*", "regex"),  # another kind
    ]:
        assert not may_reach(pattern, mode, BOB), pattern
    assert not may_reach("queue:.*", "regex", ())


def test_may_reach_accepts_patterns_that_can_match_a_grant() -> None:
    for pattern, mode in [
        ("queue:bob.*|alice.*", "regex"),
        ("queue:*", "glob"),
        ("topic:new.", "regex"),
        ("queue:(alice|bob)\\..+", "regex"),
        ("queue:[a-c]o[a-c].x", "regex"),
        ("queue:(?i)BOB.*", "regex"),
        (r"queue:(b)o\1\.x", "regex"),  # back-references are over-approximated
        ("queue:b{1,3}ob.*", "regex"),
    ]:
        assert may_reach(pattern, mode, BOB), pattern


def test_huge_repeats_do_not_hang() -> None:
    assert may_reach("queue:(a|b)*a(a|b){200}", "regex", ("queue:x*",)) is False
    assert may_reach("queue:x{100000}", "regex", ("queue:x*",))


ATOMS = ["a", "b", r"\.", ".", "[ab]", "[^a]", "(a|b.)", "(ab|)"]
QUANT = ["", "*", "?", "+", "{1,2}"]
GLOBS = ["queue:a*", "queue:?b", "queue:[ab].*", "queue:*.b", "queue:b", "queue:[!a]a", "topic:*"]
NAMES = ["queue:" + "".join(p) for n in range(5) for p in itertools.product("ab.", repeat=n)]


@given(
    st.lists(st.tuples(st.sampled_from(ATOMS), st.sampled_from(QUANT)), min_size=1, max_size=4),
    st.lists(st.sampled_from(GLOBS), min_size=1, max_size=2),
)
@settings(max_examples=300, deadline=None)
def test_a_refusal_is_never_wrong(parts: list[tuple[str, str]], grants: list[str]) -> None:
    """Brute force over short names: if some name matches the regex and a grant, it may reach."""
    body = "".join(atom + q for atom, q in parts)
    rx = re.compile(body)
    witness = [n for n in NAMES if rx.fullmatch(n[6:]) and any(fnmatch.fnmatchcase(n, g) for g in grants)]
    if witness:
        assert may_reach("queue:" + body, "regex", grants), (body, grants, witness[0])
