"""Peering options of hybridmq-operator: priorities that let a new operator take over at once."""

from __future__ import annotations

import time

import pytest

from hybridmq_operator import peering
from hybridmq_operator.main import parse_args


def test_auto_priority_is_the_start_time_so_a_later_operator_outranks_an_earlier_one() -> None:
    first = parse_args(["--peering", "hybridmq", "--priority", "auto"]).priority
    time.sleep(0.01)
    second = parse_args(["--peering", "hybridmq"]).priority  # auto is the default
    assert second > first
    assert abs(first / 1_000_000 - time.time() * 1000) < 60_000  # µs times 1,000


def test_two_replicas_started_in_the_same_instant_get_different_priorities(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Two pods of one Deployment once started in the same millisecond, got equal priorities and
    # both paused for good. Same clock reading here, down to the nanosecond: they must still differ.
    monkeypatch.setattr(time, "time_ns", lambda: 1_795_812_783_040_123_456)
    priorities = {}
    for pod in ("hybridmq-operator-7d9f8-abcde", "hybridmq-operator-7d9f8-fghij"):
        monkeypatch.setenv("POD_ID", pod)
        priorities[pod] = parse_args(["--peering", "hybridmq"]).priority
    assert len(set(priorities.values())) == 2, priorities
    # The same pod restarting in that instant keeps its draw (its own record, not a rival's).
    monkeypatch.setenv("POD_ID", "hybridmq-operator-7d9f8-abcde")
    assert parse_args([]).priority == priorities["hybridmq-operator-7d9f8-abcde"]


def test_without_a_pod_name_the_tie_breaker_is_random(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POD_ID", raising=False)
    monkeypatch.delenv("POD_NAME", raising=False)
    monkeypatch.setattr(time, "time_ns", lambda: 1_795_812_783_040_123_456)
    drawn = {parse_args([]).priority for _ in range(20)}
    assert len(drawn) > 1  # twenty equal draws of 1,000: never in practice


@pytest.mark.parametrize("later_by_ns", [1_000, 1_000_000])
def test_a_later_start_outranks_whatever_the_tie_breakers(later_by_ns: int) -> None:
    start = 1_795_812_783_040_123_000
    pods = [f"hybridmq-operator-{i:05d}" for i in range(200)]
    earliest_latecomer = min(peering.auto_priority(pod, start + later_by_ns) for pod in pods)
    latest_early_one = max(peering.auto_priority(pod, start) for pod in pods)
    assert earliest_latecomer > latest_early_one


def test_auto_priority_fits_a_kubernetes_integer_for_any_clock_reading() -> None:
    # The peering record is JSON in the API server: int64. time_ns() itself is int64 until 2262.
    assert peering.auto_priority("hybridmq-operator-zzzzz", 2**63 - 1) < 2**63


def test_explicit_priority_and_lifetime_from_flags_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse_args(["--priority", "100", "--peering-lifetime", "4"]).priority == 100
    monkeypatch.setenv("HYBRIDMQ_OPERATOR_PRIORITY", "50")
    monkeypatch.setenv("HYBRIDMQ_OPERATOR_PEERING_LIFETIME", "7")
    args = parse_args([])
    assert (args.priority, args.peering_lifetime) == (50, 7)


@pytest.mark.parametrize(
    "argv", [["--priority", "high"], ["--peering-lifetime", "0"], ["--peering-lifetime", "x"]]
)
def test_bad_peering_options_are_refused_with_a_clear_error(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        parse_args(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "priority must be an integer or 'auto'" in err or "peering lifetime must be" in err


def test_identity_is_the_pod_name_when_known() -> None:
    assert peering.identity({"POD_ID": "op-abc"}) == "op-abc"
    assert peering.identity({"POD_NAME": "op-def"}) == "op-def"
    assert peering.identity({}) is None  # Kopf's own (user@host/time/random) outside a pod
