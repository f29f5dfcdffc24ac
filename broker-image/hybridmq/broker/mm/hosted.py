"""The partitions this MM is primary of (``HostedPartitions``) and the CMs' consumer links
(``Subscriptions``): what the request handlers look up, each with one owner that changes it.

The ``ReplicaManager`` alone adds and removes hosted partitions (it promotes and demotes); the MM
server adds its internal ``topic:_LOG`` partition once at start. The MM server alone adds and
removes subscriptions (SUBSCRIBE, UNSUBSCRIBE, a CM's connection closing); the replica manager
attaches the existing ones to a partition it starts hosting.
"""

from __future__ import annotations

from collections.abc import Iterator

from hybridmq.broker.destinations.delivery import ConsumerLink
from hybridmq.broker.mm.partition import PartitionHost


class NotPrimaryHere(Exception):
    """This MM does not serve the partition as primary at the epoch asked for (NOT_PRIMARY)."""


class HostedPartitions:
    def __init__(self, me: str) -> None:
        self._me = me
        self._hosts: dict[str, PartitionHost] = {}

    def get(self, name: str) -> PartitionHost | None:
        return self._hosts.get(name)

    def primary(self, name: str, epoch: int | None = None) -> PartitionHost:
        """The host of ``name`` if this MM serves it as primary and knows ``epoch`` (the epoch the
        CM routed with; a newer one means this MM has not caught up, or lost the role)."""
        host = self._hosts.get(name)
        if host is None or not host.serving:
            raise NotPrimaryHere(f"{self._me} is not primary of {name}")
        if epoch is not None and epoch > host.epoch:
            raise NotPrimaryHere(f"{name}: epoch {epoch} > {host.epoch} here")
        return host

    def items(self) -> list[tuple[str, PartitionHost]]:
        """A copy: a handler may await while the replica manager changes the set."""
        return list(self._hosts.items())

    def __iter__(self) -> Iterator[PartitionHost]:
        return iter(list(self._hosts.values()))

    def __contains__(self, name: object) -> bool:
        return name in self._hosts

    def names(self) -> set[str]:
        return set(self._hosts)

    def add(self, host: PartitionHost) -> None:
        self._hosts[host.name] = host

    def remove(self, host: PartitionHost) -> bool:
        """Forget ``host`` if it is still the one hosted under its name (a newer one may be)."""
        if self._hosts.get(host.name) is host:
            del self._hosts[host.name]
            return True
        return False


class Subscriptions:
    """The consumer links of the CMs' subscriptions, by (CM connection, subscription key). A
    connection is known by its identity: a closed one is dropped before it can be reused."""

    def __init__(self) -> None:
        self._links: dict[tuple[int, str], ConsumerLink] = {}

    def get(self, conn: object, key: str) -> ConsumerLink | None:
        return self._links.get((id(conn), key))

    def put(self, conn: object, key: str, link: ConsumerLink) -> ConsumerLink | None:
        """Register ``link``; the link it replaces (the same subscription again), if any."""
        old = self._links.pop((id(conn), key), None)
        self._links[(id(conn), key)] = link
        return old

    def pop(self, conn: object, key: str) -> ConsumerLink | None:
        return self._links.pop((id(conn), key), None)

    def of(self, conn: object) -> dict[str, ConsumerLink]:
        """The links of one CM connection, by subscription key."""
        return {key: link for (cid, key), link in self._links.items() if cid == id(conn)}

    def drop(self, conn: object) -> list[ConsumerLink]:
        """Forget every link of a closed connection; those links."""
        keys = [k for k in self._links if k[0] == id(conn)]
        return [self._links.pop(k) for k in keys]

    def __iter__(self) -> Iterator[ConsumerLink]:
        return iter(list(self._links.values()))

    def __len__(self) -> int:
        return len(self._links)
