"""Per-user destination ACLs: glob patterns over canonical destination names.

File format (JSON): ``{"alice": {"produce": ["topic:orders.*"], "consume": ["queue:*"]}, "*": {...}}``.
The entry ``"*"`` applies to every user. No file means everything is allowed. A wildcard
subscription is allowed when its pattern text matches a consume pattern; each delivery is also
checked against the ACL by the CM (``allowed`` is cached per user and destination).
"""

from __future__ import annotations

import fnmatch
import json
from functools import lru_cache
from pathlib import Path


class AclTable:
    def __init__(self, rules: dict[str, dict[str, list[str]]] | None = None) -> None:
        self.rules = rules
        self._cache: dict[tuple[str, str, str], bool] = {}

    @lru_cache(maxsize=8192)  # noqa: B019 - the table lives as long as the process
    def allowed(self, user: str, action: str, destination: str) -> bool:
        if self.rules is None:
            return True
        for who in (user, "*"):
            for pattern in self.rules.get(who, {}).get(action, []):
                if fnmatch.fnmatchcase(destination, pattern):
                    return True
        return False

    @classmethod
    def load(cls, path: str | Path | None) -> AclTable:
        if path is None:
            return cls()
        return cls(json.loads(Path(path).read_text()))
