"""Users and ACLs that change while the CM runs: the credentials file (or Secret directory) and the
ACL file are re-read when they change (checked every ``interval_s``), as a mounted Secret is
updated by the kubelet or a file by an administrator.

``AuthFiles.poll`` answers the new ``CredentialStore`` and ``AclTable`` when something changed
(None otherwise). A file caught half-written (unreadable JSON) keeps the previous tables until the
next check. ``revoked`` names the users whose sessions must end: removed, or with another password.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from hybridmq.broker.auth.acl import AclTable
from hybridmq.broker.auth.credentials import CredentialStore

log = logging.getLogger(__name__)
Fingerprint = tuple[tuple[str, int, int, int], ...]


def _fingerprint(paths: list[Path]) -> Fingerprint:
    out: list[tuple[str, int, int, int]] = []
    for path in paths:
        files = sorted(p for p in path.iterdir() if not p.name.startswith(".")) if path.is_dir() else [path]
        for f in files:
            try:
                st = os.stat(f)  # follows the Secret volume's ..data symlinks
            except FileNotFoundError:
                continue
            out.append((str(f), st.st_ino, st.st_mtime_ns, st.st_size))
    return tuple(out)


class AuthFiles:
    def __init__(self, credentials: str | Path | None, acl: str | Path | None) -> None:
        self.credentials = Path(credentials) if credentials else None
        self.acl = Path(acl) if acl else None
        self._paths = [p for p in (self.credentials, self.acl) if p is not None]
        self._seen = _fingerprint(self._paths)
        self.reloads = 0

    def load(self) -> tuple[CredentialStore, AclTable]:
        return CredentialStore.load(self.credentials), AclTable.load(self.acl)

    def poll(self) -> tuple[CredentialStore, AclTable] | None:
        seen = _fingerprint(self._paths)
        if seen == self._seen:
            return None
        try:
            tables = self.load()
        except (OSError, ValueError, json.JSONDecodeError) as exc:
            log.warning("users/ACLs not reloaded yet (kept the previous ones): %s", exc)
            return None
        self._seen = seen
        self.reloads += 1
        return tables


def revoked(old: CredentialStore, new: CredentialStore) -> set[str]:
    """Users of ``old`` that ``new`` no longer admits with the same password (hash)."""
    if not new.enabled:
        return set()
    return {user for user, stored in old.entries().items() if new.entries().get(user) != stored}
