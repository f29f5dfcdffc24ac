"""ACL scope of wildcard subscriptions: grants narrow matchers; hopeless patterns are told apart."""

from __future__ import annotations

import re

from hybridmq.broker.auth import AclTable
from hybridmq.broker.auth.subscription_scope import literal_prefix, may_reach
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


def test_literal_prefix() -> None:
    assert literal_prefix(r"queue:alice\..*", "regex") == "queue:alice."
    assert literal_prefix("queue:alice?", "regex") == "queue:alic"  # the e is optional
    assert literal_prefix("queue:bob.*|alice.*", "regex") == "queue:"
    assert literal_prefix(r"queue:\d+", "regex") == "queue:"
    assert literal_prefix("queue:alice.[ab]*", "glob") == "queue:alice."
    assert literal_prefix("jobs", "exact") == "topic:jobs"


def test_may_reach_refuses_only_hopeless_patterns() -> None:
    # refused: every destination these match is outside the grants
    assert not may_reach(r"queue:alice\..*", "regex", BOB)
    assert not may_reach("queue:alice.*", "glob", BOB)
    assert not may_reach("topic:n.*", "glob", BOB)  # the exact grant topic:news is not matched
    assert not may_reach("queue:.*", "regex", ())
    # accepted: some granted destination can match (the MMs then apply the grants per destination)
    assert may_reach("queue:bob.*|alice.*", "regex", BOB)
    assert may_reach("queue:*", "glob", BOB)
    assert may_reach("topic:new.", "regex", BOB)
    assert may_reach(r"queue:(alice)\..*", "regex", BOB)  # not provable from the prefix: accepted


def test_a_refused_pattern_really_matches_no_granted_name() -> None:
    """Independent check with ``re`` over sample names: refusal is never wrong on these."""
    names = ["queue:bob.x", "queue:bob.", "queue:alice.x", "topic:news", "topic:newsx", "queue:b"]
    grants = ("queue:bob.*", "topic:news")
    granted = [n for n in names if n.startswith("queue:bob.") or n == "topic:news"]
    for pattern in [r"queue:alice\..*", r"queue:bo?b\..*", "queue:b.*", r"topic:new\w", "topic:news?"]:
        kind, _, body = pattern.partition(":")
        rx = re.compile(re.escape(kind + ":") + "(?:" + body + ")")
        if any(rx.fullmatch(n) for n in granted):
            assert may_reach(pattern, "regex", grants), pattern
