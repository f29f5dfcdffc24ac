"""One partition's side of transactions: prepare, the coordinator record, commit, rollback.

Read-committed without touching the delivery path: a prepared transaction's batches live inside
its ``TxPrepare`` control record (consumers and the fetch API skip control batches) and become
data batches only when it commits, tagged ``{"txn": id, "ti": index}`` so that a new primary that
finds some of them after a failover appends only the rest. The consumed records it holds (of a
queue or a topic subscription) are moved, still outstanding, from the consumer's link to a link
of the transaction: the consumer leaving does not give them back, nothing hands them out again,
and the cursor stays below them until the transaction ends (acknowledged on commit, given back on rollback).

Every record goes through the partition log, so a backup promoted at epoch + 1 finds the
transactions prepared here (``recover``) and holds their records again until they are resolved.
A transaction is one-phase (one partition: prepare, decision and commit in one flush) or
two-phase (prepare, then ``end`` after the coordinator partition's ``decide``).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from hybridmq.api.frames import BatchFlag, ErrorCode, is_reserved
from hybridmq.api.ranges import RangeSet
from hybridmq.broker.destinations.batch_payload import check_records
from hybridmq.broker.destinations.delivery import ConsumerLink, DeliveryState, Pending
from hybridmq.broker.log.control import ControlRecord, TxDecision, TxEnd, TxPrepare
from hybridmq.broker.mm.commit_error import CommitError
from hybridmq.broker.mm.storage import PartitionStorage
from hybridmq.broker.replication import PartitionPrimary
from hybridmq.broker.transactions import fault

# Kept for answering resent TX_END / TX_PREPARE frames of finished transactions.
ENDED_KEPT = 10_000


class TxRefused(Exception):
    def __init__(self, code: ErrorCode, msg: str) -> None:
        super().__init__(msg)
        self.code = code


class _NoConnection:
    """A transaction's link is never sent anything."""

    closed = True


@dataclass
class OpenTx:
    txid: str
    coordinator: str
    participants: tuple[str, ...]
    batches: list[Any]
    holds: list[tuple[str, int, int, int]]  # (state key, delivery start, first, last)
    link: ConsumerLink
    record_offset: int  # where its TxPrepare lies (retention keeps it)
    since: float = field(default_factory=time.monotonic)
    applied: set[int] = field(default_factory=set)  # batch indices already in the log
    recovered: bool = False  # its holds were rebuilt by recovery (marked acknowledged meanwhile)


def _link(txid: str) -> ConsumerLink:
    return ConsumerLink(_NoConnection(), f"tx:{txid}", 0, 0)


class TxHost(Protocol):
    """What a participant uses of its partition (``mm.partition.PartitionHost``, which owns the
    participant: so the participant cannot import it)."""

    @property
    def name(self) -> str: ...
    @property
    def serving(self) -> bool: ...
    @property
    def writable(self) -> bool: ...
    @property
    def states(self) -> dict[str, DeliveryState]: ...
    @property
    def storage(self) -> PartitionStorage: ...
    @property
    def leader(self) -> PartitionPrimary: ...

    def append_control(self, records: list[ControlRecord]) -> None: ...
    def append_internal(
        self,
        dest: str,
        count: int,
        blob: bytes,
        flags: int = 0,
        extra: dict[str, Any] | None = None,
        expiry: int = 0,
    ) -> None: ...
    async def commit(self, end: int, *, min_in_sync: bool = True) -> None: ...
    def wake_consumers(self) -> None: ...
    def write_cursors(self, everything: bool = False) -> None: ...


class TxParticipant:
    def __init__(self, host: TxHost) -> None:
        self.host = host
        self.open: dict[str, OpenTx] = {}
        self.decisions: dict[str, bool] = {}
        self.ended: dict[str, bool] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    # -- recovery (PartitionHost.recover scans the log) ---------------------------------------------
    def observe(self, rec: ControlRecord, offset: int) -> None:
        if isinstance(rec, TxPrepare):
            holds = [(str(k), int(s), int(f), int(e)) for k, s, f, e in rec.holds]
            tx = OpenTx(
                rec.txid,
                rec.coordinator,
                tuple(rec.participants),
                list(rec.batches),
                holds,
                _link(rec.txid),
                offset,
            )
            self.open[rec.txid] = tx
        elif isinstance(rec, TxDecision):
            self.decisions.setdefault(rec.txid, rec.commit)
        elif isinstance(rec, TxEnd):
            self.open.pop(rec.txid, None)
            self._ended(rec.txid, rec.commit)

    def observe_data(self, extra: dict[str, Any] | None) -> None:
        """A data batch a committing transaction appended (found again after a failover)."""
        if extra and "txn" in extra:
            tx = self.open.get(str(extra["txn"]))
            if tx is not None:
                tx.applied.add(int(extra.get("ti", -1)))

    def recovered(self) -> None:
        """Hold the consumed records of the transactions still open (prepared, not ended) again."""
        for tx in self.open.values():
            tx.recovered = True
            tx.holds = [(k, first, first, last) for k, _, first, last in tx.holds]
            for key, _, first, last in tx.holds:
                state = self.host.states.get(key)
                if state is None:
                    continue
                state.pending[first] = Pending(
                    first, last - first + 1, 0, tx.link, b"", 1, None, False, RangeSet([(first, last)])
                )
                state.acked.add(first, last)  # skipped by the queue's walk until it is resolved

    def retained(self) -> list[int]:
        """Offsets retention must keep: the records of the transactions still open."""
        return [tx.record_offset for tx in self.open.values()]

    # -- the protocol -------------------------------------------------------------------------------
    def _lock(self, txid: str) -> asyncio.Lock:
        return self._locks.setdefault(txid, asyncio.Lock())

    def _ended(self, txid: str, commit: bool) -> None:
        self.ended[txid] = commit
        self._locks.pop(txid, None)
        while len(self.ended) > ENDED_KEPT:
            del self.ended[next(iter(self.ended))]

    async def prepare(self, frame: dict[str, Any], links: dict[str, ConsumerLink]) -> None:
        """Prepare (``one``: and commit) a transaction here; TxRefused when this partition cannot
        take it (it then holds nothing of it). ``links`` maps subscription keys to this CM's links."""
        txid = str(frame["x"])
        async with self._lock(txid):
            if txid in self.ended:
                if self.ended[txid]:
                    return  # a resend of a finished one-phase commit
                raise TxRefused(ErrorCode.TX_ROLLED_BACK, f"transaction {txid} was rolled back")
            tx = self.open.get(txid)
            if tx is not None:  # a resend: prepared already
                if self.decisions.get(txid) and bool(frame.get("one")):
                    # a one-phase commit found half done after a failover: finish it first
                    await self._commit(tx)
                return
            if self.decisions.get(txid) is False:  # a late prepare of one a resolver rolled back
                raise TxRefused(ErrorCode.TX_ROLLED_BACK, f"transaction {txid} was rolled back")
            host = self.host
            batches = [_checked_batch(b) for b in frame.get("b") or ()]
            holds = self._find_holds(frame.get("k") or (), links)
            one = bool(frame.get("one"))
            try:
                host.leader.check_append(int(frame["e"]))
            except Exception as exc:
                raise TxRefused(ErrorCode.NOT_PRIMARY, f"{host.name}: {exc}") from None
            if not host.writable or not host.serving:
                raise TxRefused(ErrorCode.PARTITION_NOT_WRITABLE, f"{host.name} takes no writes")
            await fault.pause("mm-before-prepare", txid, host.name)
            tx = OpenTx(
                txid,
                str(frame["co"]),
                tuple(str(p) for p in frame["ps"]),
                batches,
                [],
                _link(txid),
                host.storage.end_offset,
            )
            for state, start, first, last in holds:  # all checked: take them all at once
                p = state.pending[start]
                p.link.inflight -= last - first + 1
                p.link.inflight_bytes -= p.size
                p.link = tx.link
                if not state.is_queue:
                    # A durable subscription left by its consumer rewinds to its cursor: the
                    # walk skips acknowledged records only (given back on rollback).
                    state.acked.add(first, last)
                tx.holds.append((state.key, start, first, last))
            self.open[txid] = tx
            records: list[ControlRecord] = [
                TxPrepare(
                    txid,
                    tx.coordinator,
                    tx.participants,
                    tuple(batches),
                    tuple(tx.holds),
                    int(time.time() * 1000),
                )
            ]
            if one:
                records.append(TxDecision(txid, True))
                self.decisions[txid] = True
            try:
                host.append_control(records)  # fenced: the lease may have lapsed while paused
            except CommitError as exc:  # nothing recorded: not prepared
                self._release(tx)
                self.open.pop(txid, None)
                self.decisions.pop(txid, None)
                raise TxRefused(exc.frame_code, str(exc)) from None
            try:
                if one:
                    await self._commit(tx)
                else:
                    await self._flush()
                    await fault.pause("mm-prepared", txid, host.name)
            except CommitError as exc:
                if one:  # stored or not: the outcome is resolved later (TX_RESOLVE)
                    raise TxRefused(ErrorCode.TX_IN_DOUBT, str(exc)) from None
                # Not prepared for sure: released here; a new primary that kept the record
                # finds no decision for it and rolls it back.
                self._release(tx)
                self.open.pop(txid, None)
                raise TxRefused(exc.frame_code, str(exc)) from None

    def _find_holds(
        self, wanted: Any, links: dict[str, ConsumerLink]
    ) -> list[tuple[DeliveryState, int, int, int]]:
        """The deliveries ``[key, start, offset, rd]`` names: one outstanding record each."""
        found = []
        for item in wanted:
            key, start, offset, rd = str(item[0]), int(item[1]), int(item[2]), int(item[3])
            link = links.get(key)
            state = None
            if link is not None:
                state = next(
                    (s for s in link.states if self.host.states.get(s.key) is s and start in s.pending), None
                )
            p = state.pending.get(start) if state is not None else None
            if state is None or p is None or p.link is not link or p.attempt != rd + 1:
                raise TxRefused(
                    ErrorCode.STALE_DELIVERY,
                    f"{self.host.name}:{offset} (attempt {rd + 1}) is not outstanding on {key}",
                )
            if p.stream is not None or list(p.left) != [(offset, offset)]:
                raise TxRefused(
                    ErrorCode.INVALID_REQUEST,
                    f"{self.host.name}:{offset}: a transaction consumes whole one-message "
                    "deliveries (a consumer window of 1, no streams)",
                )
            found.append((state, start, offset, offset))
        return found

    async def _flush(self) -> None:
        """Flushed and on the primary plus ``minInSync`` - 1 backups: a failover keeps it."""
        host = self.host
        end = host.storage.end_offset
        await host.storage.flush(end)
        await host.commit(end)  # visible once committed
        host.wake_consumers()

    async def decide(self, txid: str, commit: bool) -> bool:
        """The coordinator record: the first decision written wins; returned once replicated."""
        async with self._lock(txid):
            known = self.decisions.get(txid)
            if known is not None:
                await self._flush()  # a decision found in memory may not be replicated yet
                return known
            self.decisions[txid] = commit
            try:
                self.host.append_control([TxDecision(txid, commit)])
                await self._flush()
            except CommitError:
                self.decisions.pop(txid, None)  # not known to be durable: ask again
                raise
            return commit

    async def end(self, txid: str, commit: bool) -> None:
        """Make the outcome take effect here (idempotent)."""
        async with self._lock(txid):
            if txid in self.ended:
                if self.ended[txid] != commit:
                    raise TxRefused(ErrorCode.INVALID_REQUEST, f"transaction {txid} already ended otherwise")
                return
            tx = self.open.get(txid)
            if tx is None:
                if commit:
                    raise TxRefused(ErrorCode.INVALID_REQUEST, f"transaction {txid} is not prepared here")
                self._ended(txid, False)  # never prepared here (presumed abort)
                return
            if commit:
                await self._commit(tx)
                return
            self._release(tx)
            self.open.pop(txid, None)
            self._ended(txid, False)
            try:
                self.host.write_cursors()
                self.host.append_control([TxEnd(txid, False)])
                await self._flush()
            except CommitError:
                pass  # a new primary that lost the TxEnd finds no decision: rolled back again

    async def _commit(self, tx: OpenTx) -> None:
        host = self.host
        for i, (dest, count, blob, flags, expiry) in enumerate(tx.batches):
            if i not in tx.applied:
                host.append_internal(dest, count, blob, flags, {"txn": tx.txid, "ti": i}, expiry)
                tx.applied.add(i)
                if fault.active() and len(tx.batches) > 1 and len(tx.applied) == 1:
                    await self._flush()  # replicated: a new primary finds this batch applied
                    await fault.pause("mm-part-applied", tx.txid, host.name)
        for key, start, first, last in tx.holds:
            state = host.states.get(key)
            if state is None:
                continue
            p = state.pending.get(start)
            if p is not None and p.link is tx.link:
                state.settle(start, tx.link)
            else:
                state.mark_acked(first, last)
        tx.holds = []
        host.write_cursors()
        # CommitError (fenced): left open, applied so far; asked again, it writes only the rest.
        host.append_control([TxEnd(tx.txid, True)])
        self.open.pop(tx.txid, None)
        self._ended(tx.txid, True)
        await self._flush()

    def _release(self, tx: OpenTx) -> None:
        """Give the held records back: redelivered, flagged, to any consumer."""
        for key, start, first, last in tx.holds:
            state = self.host.states.get(key)
            if state is None:
                continue
            if tx.recovered or not state.is_queue:
                state.acked.remove(first, last)
                state.dirty = True
            state.give_back(start, link=tx.link)
        tx.holds = []
        self.host.wake_consumers()

    def in_doubt(self, age_s: float) -> list[dict[str, Any]]:
        """Open transactions prepared at least ``age_s`` ago (their CM may be gone)."""
        now = time.monotonic()
        return [
            {"x": tx.txid, "p": self.host.name, "co": tx.coordinator}
            for tx in self.open.values()
            if now - tx.since >= age_s
        ]


def _checked_batch(item: Any) -> list[Any]:
    """``[dest, count, blob, flags, expiry]`` of a produced batch, or INVALID_REQUEST."""
    try:
        dest, count, blob, flags, expiry = item
        dest, count, flags, expiry = str(dest), int(count), int(flags), int(expiry)
        if count < 1 or not isinstance(blob, bytes) or is_reserved(dest) or flags & BatchFlag.CHUNK:
            raise ValueError("bad count, blob, destination or flags (no streams in transactions)")
        if dest.startswith("queue:"):
            check_records(blob, count)
    except (TypeError, ValueError) as exc:
        raise TxRefused(ErrorCode.INVALID_REQUEST, f"bad transaction batch: {exc}") from None
    return [dest, count, blob, flags, expiry]
