"""Authentication cost: the verification cache, the dummy hash for unknown users, and the CM's gate
(one PBKDF2 verification at a time, a bounded queue, a delay before a failure is answered)."""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
from collections.abc import Callable

import pytest

from hybridmq.broker.auth.credentials import ITERATIONS, CredentialStore
from hybridmq.broker.auth.throttle import AuthBusy, AuthGate


@pytest.fixture
def pbkdf2_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Iteration counts of every PBKDF2 computation, seen from hashlib itself."""
    calls: list[int] = []
    real = hashlib.pbkdf2_hmac

    def spy(name: str, password: bytes, salt: bytes, iterations: int, dklen: int | None = None) -> bytes:
        calls.append(iterations)
        return real(name, password, salt, iterations, dklen)

    monkeypatch.setattr(hashlib, "pbkdf2_hmac", spy)
    return calls


def test_a_verified_password_is_not_hashed_again_until_credentials_change(pbkdf2_calls: list[int]) -> None:
    store = CredentialStore()
    store.add("alice", "secret")
    store.add("bob", "other")
    pbkdf2_calls.clear()
    assert store.authenticate("alice", "secret")
    assert store.authenticate("alice", "secret") and store.authenticate("alice", "secret")
    assert pbkdf2_calls == [ITERATIONS]  # the reconnects cost nothing
    assert not store.authenticate("alice", "Secret")  # a different password is checked in full
    assert not store.authenticate("bob", "secret")  # and so is the same password for another user
    assert len(pbkdf2_calls) == 3
    store.add("alice", "rotated")  # new credentials: the old password no longer gets in
    pbkdf2_calls.clear()
    assert not store.authenticate("alice", "secret")
    assert store.authenticate("alice", "rotated")
    assert len(pbkdf2_calls) == 2


def test_the_cache_is_bounded(pbkdf2_calls: list[int]) -> None:
    store = CredentialStore(cache_size=2)
    for user in ("a", "b", "c"):
        store.add(user, f"pw-{user}")
    pbkdf2_calls.clear()
    for user in ("a", "b", "c"):
        assert store.authenticate(user, f"pw-{user}")
    assert store.authenticate("c", "pw-c") and store.authenticate("b", "pw-b")
    assert len(pbkdf2_calls) == 3
    assert store.authenticate("a", "pw-a")  # evicted, the least recently used
    assert len(pbkdf2_calls) == 4


def test_an_unknown_user_costs_one_full_verification_and_no_new_hash(pbkdf2_calls: list[int]) -> None:
    store = CredentialStore()
    store.add("alice", "secret")
    assert not store.authenticate("mallory", "x")
    pbkdf2_calls.clear()
    for i in range(5):
        assert not store.authenticate("mallory", f"guess-{i}")
    assert pbkdf2_calls == [ITERATIONS] * 5  # as a real check does, no hashing of a fresh password


class SlowStore(CredentialStore):
    """A store whose full verifications take a while and record how many ran at once."""

    def __init__(self, verify_s: float) -> None:
        super().__init__()
        self.add("alice", "pbkdf2$1$00$00")  # a stored entry, so the store is on
        self.verify_s = verify_s
        self.running = 0
        self.most_at_once = 0
        self.verified = 0
        self._lock = threading.Lock()

    def authenticate(self, user: str | None, password: str | None) -> bool:
        with self._lock:
            self.running += 1
            self.verified += 1
            self.most_at_once = max(self.most_at_once, self.running)
        time.sleep(self.verify_s)
        with self._lock:
            self.running -= 1
        return password == "right"


async def outcomes(gate: AuthGate, passwords: list[str]) -> list[object]:
    async def one(password: str) -> object:
        try:
            return await gate.authenticate("alice", password)
        except AuthBusy:
            return "busy"

    return list(await asyncio.gather(*(one(p) for p in passwords)))


def run(make: Callable[[], AuthGate], passwords: list[str]) -> tuple[list[object], float]:
    async def go() -> tuple[list[object], float]:
        gate = make()
        start = time.monotonic()
        return await outcomes(gate, passwords), time.monotonic() - start

    return asyncio.run(go())


def test_one_verification_at_a_time_and_a_bounded_queue() -> None:
    store = SlowStore(0.05)
    got, _ = run(lambda: AuthGate(store, concurrency=1, max_waiting=4, failure_delay_s=0), ["right"] * 10)
    assert got == [True] * 4 + ["busy"] * 6
    assert store.most_at_once == 1 and store.verified == 4


def test_concurrency_is_configurable() -> None:
    store = SlowStore(0.1)
    got, _ = run(lambda: AuthGate(store, concurrency=3, max_waiting=10, failure_delay_s=0), ["right"] * 6)
    assert got == [True] * 6 and store.most_at_once == 3


def test_a_failure_is_answered_after_the_delay_without_holding_the_slot() -> None:
    store = SlowStore(0.01)
    got, took = run(
        lambda: AuthGate(store, concurrency=1, max_waiting=10, failure_delay_s=0.5), ["wrong"] * 5
    )
    assert got == [False] * 5
    # each waited 0.5 s, but side by side: the slot was free during the delay
    assert 0.5 <= took < 2.0, took


def test_a_cached_verification_skips_the_queue(pbkdf2_calls: list[int]) -> None:
    store = CredentialStore()
    store.add("alice", "secret")

    async def go() -> list[object]:
        gate = AuthGate(store, concurrency=1, max_waiting=0, failure_delay_s=0)  # nothing may queue
        with pytest.raises(AuthBusy):
            await gate.authenticate("alice", "secret")
        store.authenticate("alice", "secret")  # verified once (as a connection before would have)
        return [await gate.authenticate("alice", "secret") for _ in range(3)]

    assert asyncio.run(go()) == [True, True, True]


def test_bad_gate_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="concurrency >= 1"):
        AuthGate(CredentialStore(), concurrency=0)
