"""The stored form of a client password: ``pbkdf2$<iterations>$<salt hex>$<hash hex>`` (salted
PBKDF2-SHA256). Shared by the CM, which verifies it, and the operator, which writes the CMs' users
from BrokerUsers (so a plain password never reaches a CM's configuration)."""

from __future__ import annotations

import hashlib
import hmac
import os

ITERATIONS = 20_000
PREFIX = "pbkdf2$"


def hash_password(password: str, iterations: int = ITERATIONS) -> str:
    salt = os.urandom(16)
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    return f"{PREFIX}{iterations}${salt.hex()}${digest.hex()}"


def verify_password(password: str, stored: str) -> bool:
    try:
        _, iterations, salt_hex, digest_hex = stored.split("$")
        digest = hashlib.pbkdf2_hmac("sha256", password.encode(), bytes.fromhex(salt_hex), int(iterations))
    except ValueError:
        return False
    return hmac.compare_digest(digest.hex(), digest_hex)
