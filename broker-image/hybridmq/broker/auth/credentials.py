"""User credentials, kept only as salted PBKDF2-SHA256 hashes.

Sources: a mounted Secret directory (one file per user, the file content is the password) or a file
of ``user:password`` lines. Plain passwords are hashed on load and dropped; a file may also hold
already-hashed entries ``user:pbkdf2$<iterations>$<salt hex>$<hash hex>`` (``hash_password``
produces them). No source configured means authentication is off (any user name is accepted).
"""

from __future__ import annotations

import hashlib
import hmac
import os
from pathlib import Path

ITERATIONS = 20_000
_PREFIX = "pbkdf2$"


def hash_password(password: str, iterations: int = ITERATIONS) -> str:
    salt = os.urandom(16)
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    return f"{_PREFIX}{iterations}${salt.hex()}${digest.hex()}"


def verify_password(password: str, stored: str) -> bool:
    try:
        _, iterations, salt_hex, digest_hex = stored.split("$")
        digest = hashlib.pbkdf2_hmac("sha256", password.encode(), bytes.fromhex(salt_hex), int(iterations))
    except ValueError:
        return False
    return hmac.compare_digest(digest.hex(), digest_hex)


class CredentialStore:
    def __init__(self, hashes: dict[str, str] | None = None) -> None:
        self._hashes: dict[str, str] = dict(hashes or {})
        self.enabled = hashes is not None

    def add(self, user: str, password: str) -> None:
        self._hashes[user] = password if password.startswith(_PREFIX) else hash_password(password)
        self.enabled = True

    def authenticate(self, user: str | None, password: str | None) -> bool:
        if not self.enabled:
            return True
        stored = self._hashes.get(user or "")
        if stored is None:
            # Same cost as a real check, so timing does not reveal which users exist.
            verify_password(password or "", hash_password("x", 1000))
            return False
        return verify_password(password or "", stored)

    @classmethod
    def load(cls, path: str | Path | None) -> CredentialStore:
        store = cls()
        if path is None:
            return store
        p = Path(path)
        if p.is_dir():
            for f in sorted(p.iterdir()):
                if f.is_file() and not f.name.startswith("."):
                    store.add(f.name, f.read_text().strip())
        else:
            for line in p.read_text().splitlines():
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                user, _, password = line.partition(":")
                store.add(user.strip(), password.strip())
        store.enabled = True
        return store
