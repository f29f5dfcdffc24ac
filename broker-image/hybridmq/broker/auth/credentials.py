"""User credentials, kept only as salted PBKDF2-SHA256 hashes.

Sources: a mounted Secret directory (one file per user, the file content is the password) or a file
of ``user:password`` lines. Plain passwords are hashed on load and dropped; a file may also hold
already-hashed entries ``user:pbkdf2$<iterations>$<salt hex>$<hash hex>`` (``hash_password``
produces them). No source configured means authentication is off (any user name is accepted).

Successful verifications are cached (bounded, keyed by the user and a keyed BLAKE2 digest of the
password under a per-process random key, never the password itself), so a legitimate reconnect
costs no PBKDF2; any change of the credentials empties the cache. Unknown users are checked against
a dummy hash made once, at the same iteration count as real entries, so timing does not reveal
which users exist.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from pathlib import Path

from hybridmq.api.password_hash import ITERATIONS, hash_password, verify_password
from hybridmq.api.password_hash import PREFIX as _PREFIX

__all__ = ["ITERATIONS", "CredentialStore", "hash_password", "verify_password"]

CACHE_SIZE = 1024


class CredentialStore:
    def __init__(self, hashes: dict[str, str] | None = None, cache_size: int = CACHE_SIZE) -> None:
        self._hashes: dict[str, str] = dict(hashes or {})
        self._origin: dict[str, str] = {
            u: hashlib.blake2b(h.encode(), digest_size=16).hexdigest() for u, h in self._hashes.items()
        }
        self.enabled = hashes is not None
        self._cache_key = os.urandom(32)
        self._cache: OrderedDict[tuple[str, bytes], None] = OrderedDict()
        self._cache_size = cache_size
        self._cache_lock = threading.Lock()  # checks run on executor threads, lookups on the loop
        self._dummy: str | None = None
        self.pbkdf2_checks = 0  # full verifications done (what the cache and the CM's gate save)

    def add(self, user: str, password: str) -> None:
        self._hashes[user] = password if password.startswith(_PREFIX) else hash_password(password)
        # What was loaded (plain or hashed), as a digest: a reload finds changed users by it.
        self._origin[user] = hashlib.blake2b(password.encode(), digest_size=16).hexdigest()
        with self._cache_lock:
            self._cache.clear()
        self.enabled = True

    def entries(self) -> dict[str, str]:
        """user -> digest of the entry loaded (what a reload compares to find changed users)."""
        return dict(self._origin)

    def _cache_entry(self, user: str, password: str) -> tuple[str, bytes]:
        digest = hashlib.blake2b(password.encode(), key=self._cache_key, digest_size=32).digest()
        return user, digest

    def cached(self, user: str | None, password: str | None) -> bool | None:
        """The answer when it needs no PBKDF2 (authentication off, or verified before), else None."""
        if not self.enabled:
            return True
        entry = self._cache_entry(user or "", password or "")
        with self._cache_lock:
            if entry in self._cache:
                self._cache.move_to_end(entry)
                return True
        return None

    def authenticate(self, user: str | None, password: str | None) -> bool:
        if self.cached(user, password):
            return True
        stored = self._hashes.get(user or "")
        self.pbkdf2_checks += 1
        if stored is None:
            # Same cost as a real check, so timing does not reveal which users exist.
            if self._dummy is None:
                self._dummy = hash_password(os.urandom(16).hex())
            verify_password(password or "", self._dummy)
            return False
        if not verify_password(password or "", stored):
            return False
        entry = self._cache_entry(user or "", password or "")
        with self._cache_lock:
            self._cache[entry] = None
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return True

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
