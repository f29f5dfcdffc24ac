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
    assert second > first and abs(first - time.time() * 1000) < 60_000


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
