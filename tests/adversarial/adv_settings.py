"""Run length and seed of the adversarial suite, from the environment (short by default, for CI).

``HYBRIDMQ_ADVERSARIAL_SECONDS``: seconds of chaos / of hostile flood windows (default 40 / 50);
``HYBRIDMQ_ADVERSARIAL_SEED``: the seed (default: a fresh one, printed so a run can be replayed);
``HYBRIDMQ_ADVERSARIAL_SETTLE_S``: how far an ACK must be from any fault to count as settled (1.5);
``HYBRIDMQ_ADVERSARIAL_ATTACKS``: comma-separated hostile attacks to use (default: all of them);
``HYBRIDMQ_ADVERSARIAL_CM_ARGS``: extra ``hybridmq cm`` arguments for the hostile run's CM (e.g. an
unfair setting, to see the latency verdict fire).
"""

from __future__ import annotations

import os
import random
import shlex


def seconds(default: float) -> float:
    return float(os.environ.get("HYBRIDMQ_ADVERSARIAL_SECONDS") or default)


def seed() -> int:
    value = os.environ.get("HYBRIDMQ_ADVERSARIAL_SEED")
    return int(value) if value else random.SystemRandom().randrange(1 << 32)


def settle_s() -> float:
    return float(os.environ.get("HYBRIDMQ_ADVERSARIAL_SETTLE_S") or 1.5)


def attacks() -> list[str]:
    return [a for a in (os.environ.get("HYBRIDMQ_ADVERSARIAL_ATTACKS") or "").split(",") if a]


def cm_args() -> list[str]:
    return shlex.split(os.environ.get("HYBRIDMQ_ADVERSARIAL_CM_ARGS") or "")
