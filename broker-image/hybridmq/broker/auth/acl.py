"""Per-user destination ACLs: glob patterns over canonical destination names.

File format (JSON): ``{"alice": {"produce": ["topic:orders.*"], "consume": ["queue:*"]}, "*": {...}}``.
The entry ``"*"`` applies to every user. No file means everything is allowed.

``allowed`` decides one concrete destination. A wildcard subscription is never decided by its
pattern's text: the CM refuses one that cannot match any granted destination
(``auth/subscription_scope.py``) and otherwise hands the user's ``grants`` to the MMs, which only
ever match destinations inside them (``destinations/matching.py``), now and for destinations
created later.
"""

from __future__ import annotations

import fnmatch
import json
from functools import lru_cache
from pathlib import Path


class AclTable:
    def __init__(self, rules: dict[str, dict[str, list[str]]] | None = None) -> None:
        self.rules = rules

    @lru_cache(maxsize=8192)  # noqa: B019 - the table lives as long as the process
    def allowed(self, user: str, action: str, destination: str) -> bool:
        grants = self.grants(user, action)
        return grants is None or any(fnmatch.fnmatchcase(destination, g) for g in grants)

    def grants(self, user: str, action: str) -> tuple[str, ...] | None:
        """The glob patterns ``user`` may ``action`` (``None``: no ACLs, everything is allowed)."""
        if self.rules is None:
            return None
        return tuple(p for who in (user, "*") for p in self.rules.get(who, {}).get(action, []))

    @classmethod
    def load(cls, path: str | Path | None) -> AclTable:
        if path is None:
            return cls()
        return cls(json.loads(Path(path).read_text()))
