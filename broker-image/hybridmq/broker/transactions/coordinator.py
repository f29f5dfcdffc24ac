"""The CM as transaction manager.

A TX_COMMIT carries the whole transaction: the batches the session produced (each to a partition
it chose) and the messages it consumed (by their consumer's subscription on this CM). The
partitions involved are its participants; the lowest-named one is its coordinator partition, whose
log keeps the decision (``TxDecision``, replicated like data, as Kafka keeps its transaction log in
a replicated internal topic).

* One participant: one-phase commit (TX_PREPARE with ``one``: prepare, decision and commit in one
  flush).
* More: two-phase commit. TX_PREPARE to all (COMMIT_PREPARE -> READY / FAIL); any FAIL rolls back
  (TX_END commit=false, presumed abort: no decision needed); all READY -> TX_DECIDE commit at the
  coordinator partition (the first decision written wins, so a resolver's rollback and this commit
  cannot both happen) -> TX_END commit=true to all (COMMIT_FINAL -> COMPLETE).

A CM that dies before the decision leaves prepared transactions that any CM's resolver
(``resolver.py``) rolls back once they are ``TX_TIMEOUT_S`` old; one that dies after it leaves a
decision the resolver carries out. A client whose commit went unanswered asks with TX_RESOLVE.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import TYPE_CHECKING, Any

from hybridmq.api.frames import ErrorCode, FrameType, canonical, is_reserved
from hybridmq.api.requests import TxCommit, TxResolve
from hybridmq.broker.routing import Unroutable
from hybridmq.broker.transactions import fault
from hybridmq.protocol import RemoteError
from hybridmq.protocol.connection import ConnectionClosed

if TYPE_CHECKING:
    from hybridmq.broker.cm.context import CMContext
    from hybridmq.broker.cm.session import Session

log = logging.getLogger(__name__)

MAX_TX_RECORDS = 10_000  # records produced plus messages consumed by one transaction
MAX_OPEN_TX = int(os.environ.get("HYBRIDMQ_TX_MAX_OPEN", "1024"))  # committing at once on one CM
TX_TIMEOUT_S = float(os.environ.get("HYBRIDMQ_TX_TIMEOUT_S", "10"))  # prepared, then resolved
# Worth asking again: the partition moved or its MM is (re)starting.
RETRIABLE = frozenset(
    {
        ErrorCode.NOT_PRIMARY,
        ErrorCode.MM_UNAVAILABLE,
        ErrorCode.STALE_EPOCH,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.UNKNOWN_EPOCH,
        ErrorCode.UNKNOWN_PARTITION,
    }
)


class TxFailed(Exception):
    def __init__(self, code: ErrorCode, msg: str) -> None:
        super().__init__(msg)
        self.code = code


class TxManager:
    def __init__(self, cm: CMContext) -> None:
        self.cm = cm
        self.open: set[str] = set()  # transactions this CM is committing now
        self.committed = 0
        self.rolled_back = 0

    # -- routing -----------------------------------------------------------------------------------
    async def request(self, partition: str, frame: dict[str, Any], within_s: float) -> dict[str, Any]:
        """Send ``frame`` to the primary of ``partition`` with its epoch; ask again (a new primary,
        a restarted MM) until ``within_s`` passed. TxFailed with the last reason otherwise."""
        deadline = time.monotonic() + within_s
        why: tuple[ErrorCode, str] = (ErrorCode.MM_UNAVAILABLE, f"primary of {partition} unavailable")
        while True:
            try:
                route = self.cm.routes.primary(partition)
            except Unroutable as exc:
                why = (exc.code, exc.msg)
            else:
                left = max(0.5, deadline - time.monotonic())
                try:
                    fut = route.link.request(partition, dict(frame, p=partition, e=route.epoch))
                    await route.conn.drain()
                    async with asyncio.timeout(left):
                        reply: dict[str, Any] = await fut
                    return reply
                except RemoteError as exc:
                    if exc.code not in RETRIABLE:
                        raise TxFailed(ErrorCode(exc.code), exc.msg) from None
                    why = (ErrorCode(exc.code), exc.msg)
                except (ConnectionClosed, ConnectionError, TimeoutError) as exc:
                    why = (ErrorCode.MM_UNAVAILABLE, f"lost the primary of {partition}: {exc!r}")
            if time.monotonic() >= deadline:
                raise TxFailed(*why)
            await asyncio.sleep(0.1)

    # -- TX_COMMIT ---------------------------------------------------------------------------------
    async def commit(self, session: Session, frame: TxCommit) -> None:
        txid = frame.transaction
        if txid in self.open:
            session.conn.reply_error(
                frame, ErrorCode.INVALID_REQUEST, f"transaction {txid} is committing already"
            )
            return
        if len(self.open) >= MAX_OPEN_TX:
            session.conn.reply_error(
                frame,
                ErrorCode.TX_ROLLED_BACK,
                f"too many transactions committing on this CM ({MAX_OPEN_TX}): nothing done, retry later",
            )
            return
        try:
            work = self._parse(session, frame)
        except TxFailed as exc:
            session.conn.reply_error(frame, exc.code, str(exc))
            return
        self.open.add(txid)
        try:
            reply = await self._run(txid, work)
        except TxFailed as exc:
            if exc.code == ErrorCode.TX_ROLLED_BACK:
                self.rolled_back += 1
            session.conn.reply_error(frame, exc.code, str(exc))
            return
        finally:
            self.open.discard(txid)
        self.committed += 1
        session.conn.reply(frame, {"t": FrameType.OK, "x": txid, "committed": True, **reply})

    def _parse(self, session: Session, frame: TxCommit) -> dict[str, dict[str, list[Any]]]:
        """Participant partition -> {"b": batches, "k": holds}; TxFailed on what the decoder could
        not check (ACLs, partitions, subscriptions, the records limit)."""
        table = self.cm.source.partitions()
        work: dict[str, dict[str, list[Any]]] = {}
        records = len(frame.consumed)
        for p, raw, n, blob, flags, expiry in frame.batches:
            dest = canonical(raw)
            if is_reserved(dest):
                raise TxFailed(
                    ErrorCode.RESERVED_NAME, f"destination {raw!r} is reserved (names starting with '_')"
                )
            if not self.cm.acl.allowed(session.user, "produce", dest):
                raise TxFailed(ErrorCode.ACL_DENIED, f"user {session.user!r} may not produce to {dest!r}")
            a = table.get(p)
            if a is None:
                raise TxFailed(ErrorCode.UNKNOWN_PARTITION, f"no partition {p!r}")
            if not a.writable:
                raise TxFailed(ErrorCode.PARTITION_NOT_WRITABLE, f"{p} takes no writes")
            records += n
            work.setdefault(p, {"b": [], "k": []})["b"].append([dest, n, blob, flags, expiry])
        for key, p, start, offset, rd in frame.consumed:
            entry = self.cm.subs.get(key)
            if entry is None or entry.session.user != session.user:
                raise TxFailed(
                    ErrorCode.UNKNOWN_SUBSCRIPTION,
                    f"no subscription {key!r} of user {session.user!r} on this CM (a transaction's "
                    "consumers connect to its session's CM)",
                )
            if p not in table:
                raise TxFailed(ErrorCode.UNKNOWN_PARTITION, f"no partition {p!r}")
            work.setdefault(p, {"b": [], "k": []})["k"].append([key, start, offset, rd])
        if records > MAX_TX_RECORDS:
            raise TxFailed(
                ErrorCode.INVALID_REQUEST,
                f"a transaction holds at most {MAX_TX_RECORDS} records, not {records}",
            )
        return work

    async def _run(self, txid: str, work: dict[str, dict[str, list[Any]]]) -> dict[str, Any]:
        participants = sorted(work)
        if not participants:
            return {"incomplete": []}
        co = participants[0]
        base = {"x": txid, "co": co, "ps": participants}
        if len(participants) == 1:
            prepare = {"t": FrameType.TX_PREPARE, **base, **work[co], "one": True}
            try:
                await self.request(co, prepare, TX_TIMEOUT_S / 2)
            except TxFailed as exc:
                if exc.code == ErrorCode.TX_IN_DOUBT or exc.code in RETRIABLE:
                    raise TxFailed(ErrorCode.TX_IN_DOUBT, f"transaction {txid}: {exc}") from None
                raise TxFailed(ErrorCode.TX_ROLLED_BACK, f"transaction {txid} rolled back: {exc}") from None
            return {"incomplete": []}
        await fault.pause("before-prepare", txid)
        failure = await self._prepare_all(txid, base, work)
        if failure is not None:
            await self._end_all(txid, participants, False, 2.0)
            raise TxFailed(ErrorCode.TX_ROLLED_BACK, f"transaction {txid} rolled back: {failure}")
        await fault.pause("before-decision", txid)
        try:
            decided = await self.request(
                co, {"t": FrameType.TX_DECIDE, "x": txid, "commit": True}, TX_TIMEOUT_S / 2
            )
        except TxFailed as exc:
            raise TxFailed(
                ErrorCode.TX_IN_DOUBT, f"transaction {txid}: no decision recorded: {exc}"
            ) from None
        if not decided.get("commit"):  # a resolver rolled it back first
            await self._end_all(txid, participants, False, 2.0)
            raise TxFailed(ErrorCode.TX_ROLLED_BACK, f"transaction {txid} rolled back (timed out)")
        await fault.pause("after-decision", txid)
        incomplete = await self._end_all(txid, participants, True, TX_TIMEOUT_S)
        return {"incomplete": incomplete}

    async def _prepare_all(
        self, txid: str, base: dict[str, Any], work: dict[str, dict[str, list[Any]]]
    ) -> str | None:
        """COMMIT_PREPARE to every participant; the first failure's reason, None when all READY."""

        async def one(p: str) -> str | None:
            try:
                await self.request(p, {"t": FrameType.TX_PREPARE, **base, **work[p]}, 3.0)
            except TxFailed as exc:
                return f"{p}: {exc}"
            return None

        if fault.active():  # one at a time, so a test can stop between them
            for i, p in enumerate(base["ps"]):
                why = await one(p)
                if why is not None:
                    return why
                if i == 0:
                    await fault.pause("after-ready", txid)
            return None
        results = await asyncio.gather(*(one(p) for p in base["ps"]))
        return next((r for r in results if r is not None), None)

    async def _end_all(self, txid: str, participants: list[str], commit: bool, within_s: float) -> list[str]:
        """COMMIT_FINAL (or rollback) to every participant; those that did not answer COMPLETE
        (a resolver finishes them)."""

        async def one(p: str) -> str | None:
            try:
                await self.request(p, {"t": FrameType.TX_END, "x": txid, "commit": commit}, within_s)
            except TxFailed as exc:
                log.warning("transaction %s: %s not finished (%s): left to the resolver", txid, p, exc)
                return p
            return None

        if fault.active():
            left = []
            for i, p in enumerate(participants):
                if await one(p) is not None:
                    left.append(p)
                if i == 0 and commit:
                    await fault.pause("after-complete", txid)
            return left
        return [p for p in await asyncio.gather(*(one(p) for p in participants)) if p is not None]

    # -- outcome of a transaction whose CM was lost --------------------------------------------------
    async def outcome(self, txid: str, co: str, participants: list[str]) -> bool:
        """Decide (rolled back unless committed already) and carry it out where it can now."""
        decided = await self.request(co, {"t": FrameType.TX_DECIDE, "x": txid, "commit": False}, TX_TIMEOUT_S)
        commit = bool(decided.get("commit"))
        await self._end_all(txid, sorted(participants), commit, 3.0)
        return commit

    async def resolve(self, session: Session, frame: TxResolve) -> None:
        txid, ps = frame.transaction, frame.participants
        if txid in self.open:
            session.conn.reply_error(
                frame, ErrorCode.TX_IN_DOUBT, f"transaction {txid} is still committing here"
            )
            return
        try:
            commit = await self.outcome(txid, min(ps), ps)
        except TxFailed as exc:
            session.conn.reply_error(frame, ErrorCode.TX_IN_DOUBT, f"transaction {txid}: {exc}")
            return
        session.conn.reply(frame, {"t": FrameType.OK, "x": txid, "committed": commit})
