"""Cluster-unique identifiers (node id + counter).

A session id is ``<node>-<boot>-<counter>``: the node name is unique in the cluster, ``boot`` (the
start time in ms, base 36) separates incarnations of a restarted node, the counter separates ids of
one incarnation. Message ids need no generator: ``<partition>:<offset>`` is unique and stable across
redeliveries because a partition's offsets are assigned once by its primary.
"""

from __future__ import annotations

import itertools
import time


def _base36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, rem = divmod(n, 36)
        out = digits[rem] + out
        if n == 0:
            return out


class IdGenerator:
    def __init__(self, node: str) -> None:
        self.node = node
        self.boot = _base36(int(time.time() * 1000))
        self._counter = itertools.count(1)

    def next(self) -> str:
        return f"{self.node}-{self.boot}-{next(self._counter)}"


def message_id(partition: str, offset: int) -> str:
    return f"{partition}:{offset}"
