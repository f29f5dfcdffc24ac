"""HybridMQ wire protocol: frame types, field names, error codes and the handshake version.

Framing (``hybridmq.protocol`` implements it): every frame is a 4-byte big-endian unsigned
length followed by that many bytes of msgpack. The body is a msgpack *map* with short string keys.
A reader checks the length against its maximum frame size **before** reading the body; a body that
is not a map with an integer ``t`` is malformed. Both end that one connection with an ``ERROR``
frame (``code`` = ``FRAME_TOO_LARGE`` / ``PROTOCOL_ERROR``, ``fatal`` = true).

Common keys: ``t`` frame type, ``c`` correlation id of a request (client-chosen, unique per
connection), ``r`` the correlation id a reply answers. Requests are pipelined: many may be in flight
on one connection and replies may come out of order.

Handshake: the connecting side sends ``HELLO {v, id, user, password, role}``; the server answers
``HELLO_OK {v, session, node, max_frame}`` or a fatal ``ERROR`` (``UNSUPPORTED_VERSION``,
``AUTH_FAILED``, or ``AUTH_BUSY``: too many authentications in progress, retry) and closes. Nothing
else is accepted before ``HELLO_OK``.

Records and batches: a producer packs many records into ONE opaque blob ``b`` (msgpack array of
``[value, key, headers, timestamp_ms]``); CM and MM never decode it. A batch names its destination
``d``, record count ``n``, flags ``f`` and absolute expiry ``x`` (ms since epoch, 0 = never).
Offsets count records; the message id of a record is ``<partition>:<offset>`` (cluster-unique).

Frames (direction; fields):

=================  ==========================================================================
HELLO              client->server: v, id (client id), user, password, role ("client"|"cm"|"mm"),
                   app (application name for the directory's application table). On an MM
                   port only role "cm"/"mm" with the cluster secret as password is accepted.
HELLO_OK           server->client: r?, v, session, node, max_frame
ERROR              either: r (when answering a request), code, msg, fatal (bool)
OK                 reply: r, plus request-specific fields
OPEN_PRODUCER      client->CM: c, ptype ("fixed"|"on-demand"), key?, partition?
                   -> OK {r, partition, ptype (its type: a fixed partition's producers resend
                   on PARTITION_NOT_WRITABLE, its failover), producer_id (str), pid (int,
                   idempotence id)}
PRODUCE            client->CM: c, p (partition), d, n, b, f, x, pid?, pep? (producer epoch),
                   seq? (base sequence of the batch; the MM stores a resend of a stored
                   (pid, pep, seq) once and acks it with the original offsets, ``dup`` = true)
                   CM->MM: the same plus e (partition epoch); MM refuses a stale epoch
PRODUCE_ACK        reply: r, p, o (base offset), l (last offset), dup (resend of a stored batch)
SUBSCRIBE          client->CM: c, s (client subscription id), d (destination or pattern),
                   m ("exact"|"glob"|"regex"), dn (durable name or nil), w (window records),
                   wb (window bytes). CM->MM: same with s = CM-wide key, e = {partition: epoch},
                   acl (the user's consume grants, ACL globs; nil = no ACLs): the MM matches only
                   destinations inside them
UNSUBSCRIBE        c, s
DELIVER            MM->CM->client: s, p, d, o (offset of its first record), n (records), b
                   (records blob: n consecutive records of one stored batch, at most what the
                   consumer's window has room for), f, rd (delivery count - 1 of these records;
                   > 0: a redelivery; queues and durable subscriptions count across failovers),
                   xa (extra attributes: chunk info, DMQ origin and reason), e (partition
                   epoch of the MM that delivered it)
ACK                client->CM->MM: s, p, o (the DELIVER's o: which delivery), a? ([first, last]
                   offsets of the records acknowledged; without it all the delivery has left),
                   rd? (the DELIVER's rd: which hand-out is acknowledged), e? (the DELIVER's e),
                   c? ; the CM routes it to the MM that delivered at that epoch (else to the
                   partition's primary in its table) with e (partition epoch; the MM refuses
                   acks of an older epoch). With c: OK {r} once
                   the acknowledgement is committed (replicated: never delivered again), ERROR
                   STALE_DELIVERY (those records are not outstanding in that hand-out: they are
                   or were redelivered, or were acknowledged), or ERROR INVALID_REQUEST (a
                   malformed a). Without c no reply.
NACK               client->CM->MM: s, p, o, a?, rd?, e?, rq? — give the records back for redelivery;
                   rq false (queues): reject them, they move to queue:_DMQ (reason "rejected by
                   a consumer"). No reply without c; with c: OK (a rejection once committed), or
                   ERROR STALE_DELIVERY / INVALID_REQUEST.
ADMIN              client->CM: c, cmd, args -> one or more ADMIN_PART {r, i, of, data};
                   a composite reply says how many parts (``of``) to expect.
DIRECTORY          client->CM: c, next? (application name) -> OK {r, brokers: [BrokerEntry dicts],
                   partitions: [...], applications: {cm: {app: sessions}} (all CMs),
                   next?: BrokerEntry dict of the CM the application should use next}
MARKER             client->CM: c, d (topic), id (marker id), v? (bytes) -> OK {r, partitions: [names
                   that got the marker record], failed: {partition: reason}}
FETCH              client->CM: c, p (partition), o (offset), e? (exclusive end; capped at the
                   high watermark), mb? (max bytes), i? (also internal ``_`` destinations)
                   -> OK {r, p, start (log start), hw (high watermark), batches: [{o (base offset),
                   n, d, pid, pep, seq (base sequence), ts, ctl (control), f, xa, b (records
                   blob)}]}; whole stored batches (the first may start below ``o``); a batch the
                   session may not see is a stub {o, n, ctl: true, skip: reason}. CM->MM: the same
                   plus pe (partition epoch). Errors: UNKNOWN_PARTITION, OFFSET_OUT_OF_RANGE
                   (``o`` below the log start; the ERROR carries start and hw), NOT_PRIMARY,
                   MM_UNAVAILABLE. (``broker/cm/fetch_route.py``, ``broker/mm/fetch_handler.py``)
FETCH_META         client->CM: c, p? (partition names, default all), pids? (producer ids) -> OK {r,
                   partitions: [{name, type, primary, epoch, writable, start, hw, end,
                   incarnation? (random id born with the partition's data), err?,
                   producers? ({pid: [producer epoch, last stored sequence, [[first seq, last
                   seq, base offset, last offset], ...]]}, with pids; only from the primary of
                   the table's epoch, else err)}]}. CM->MM: c, p?, pids? ->
                   OK {r, partitions: {name: {start, hw, end, epoch, inc?, producers?}}}
PING / PONG        c / r (liveness)
TX_COMMIT          client->CM: c, x (transaction id, 1..64 chars), b ([[p, d, n, b, f, x], ...]:
                   record batches to produce), k ([[key, p, o, rd], ...]: consumed queue
                   messages, one-record deliveries, by the consumer's CM-wide subscription key)
                   -> OK {r, x, committed: true, incomplete: [partitions still finishing]}, or
                   ERROR TX_ROLLED_BACK (nothing of it took effect), TX_IN_DOUBT (the outcome is
                   not known yet: ask again with TX_RESOLVE), INVALID_REQUEST (limits, bad input)
TX_RESOLVE         client->CM: c, x, ps (participant partitions) -> the outcome of a transaction
                   whose commit was lost with its CM: OK {r, x, committed} (undecided: rolled back)
TX_PREPARE         CM->MM: c, x, p, e, co (coordinator partition), ps, b, k, one (one-phase)
                   -> OK (READY; one-phase: COMPLETE) or ERROR (FAIL: the MM holds nothing)
TX_DECIDE          CM->MM of the coordinator partition: c, x, p, commit -> OK {r, commit}: the
                   durable decision (the first one written wins; replicated before the reply)
TX_END             CM->MM: c, x, p, commit -> OK once the outcome is committed there (COMPLETE)
TX_INDOUBT         CM->MM: c, age (seconds) -> OK {txs: [{x, p, co}]}: prepared, undecided ones
=================  ==========================================================================

Batch flags (``f``): ``CHUNK`` marks one chunk of a very large message (``b`` is raw bytes, ``xa``
= {sid, seq, fin}); the final chunk has ``fin`` = true. ``DMQ`` marks a batch moved to ``_DMQ``
(``xa`` = {orig, reason, from}).
"""

from __future__ import annotations

from enum import IntEnum

PROTOCOL_VERSION = 1
LENGTH_PREFIX_BYTES = 4
DEFAULT_MAX_FRAME = 16 * 1024 * 1024
RESERVED_PREFIX = "_"
ADMIN_DESTINATION = "_ADMIN"
LOG_DESTINATION = "topic:_LOG"
DMQ_DESTINATION = "queue:_DMQ"


class FrameType(IntEnum):
    HELLO = 1
    HELLO_OK = 2
    ERROR = 3
    OK = 4
    OPEN_PRODUCER = 10
    PRODUCE = 11
    PRODUCE_ACK = 12
    SUBSCRIBE = 20
    UNSUBSCRIBE = 21
    DELIVER = 22
    ACK = 23
    NACK = 24
    # CM -> consumer: deliveries of partition ``p`` below epoch ``e`` are void (it failed over; the
    # new primary hands their batches out again, flagged): drop what is not handed out yet. With
    # ``lost`` instead: those at epochs up to ``lost`` received so far are void (the connection from
    # their MM ended, it hands them out again, flagged); later ones are not.
    REVOKE = 25
    ADMIN = 30
    ADMIN_PART = 31
    DIRECTORY = 40
    MARKER = 41
    PING = 50
    PONG = 51
    # Between MMs (a backup to its primary; broker/mm/replica_transport.py): the message ``m`` is a
    # replication request, answered with OK carrying the response in ``m``.
    REPLICA_FETCH = 60
    REPLICA_EPOCH_END = 61
    REPLICA_SNAPSHOT = 62
    REPLICA_FETCH_BATCH = 63  # one fetch for every partition a backup copies from this primary
    FETCH = 70
    FETCH_META = 71
    READER_COMMIT = 72  # a named reader's committed offset in one partition
    # Transacted sessions (broker/transactions/): the client's commit, and the two-phase commit
    # between the CM (transaction manager) and the MMs of the partitions involved.
    TX_COMMIT = 80
    TX_RESOLVE = 81
    TX_PREPARE = 82
    TX_DECIDE = 83
    TX_END = 84
    TX_INDOUBT = 85


class ErrorCode(IntEnum):
    # One vocabulary for clients, CMs, MMs and the replication between MMs (whose responses carry
    # ``NONE`` when they succeeded).
    NONE = 0
    PROTOCOL_ERROR = 1
    FRAME_TOO_LARGE = 2
    UNSUPPORTED_VERSION = 3
    AUTH_FAILED = 10
    NOT_AUTHENTICATED = 11
    ACL_DENIED = 12
    RESERVED_NAME = 13
    INVALID_DESTINATION = 14
    # The CM has too many authentications in progress: nothing was checked, reconnect later (retriable).
    AUTH_BUSY = 15
    UNKNOWN_PARTITION = 20
    NOT_PRIMARY = 21
    STALE_EPOCH = 22  # the request's epoch is older than the partition's: refused (fencing)
    PARTITION_NOT_WRITABLE = 23
    MM_UNAVAILABLE = 24
    OUT_OF_ORDER_SEQUENCE = 25
    PRODUCER_FENCED = 26
    OFFSET_OUT_OF_RANGE = 27
    # Fewer in-sync copies than the partition's minInSync: nothing stored, resend later (retriable).
    NOT_ENOUGH_REPLICAS = 28
    # The partition's backlog stayed over its limit (a consumer too far behind) while the produce
    # waited: nothing stored, resend later (retriable).
    BACKLOG_FULL = 29
    INVALID_REQUEST = 30
    UNKNOWN_SUBSCRIPTION = 31
    STALE_DELIVERY = 32
    # Replication between MMs.
    UNKNOWN_EPOCH = 33  # the request's epoch is newer: this replica is behind (retry)
    UNKNOWN_REPLICA = 34  # the fetching replica is not assigned to the partition
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 35  # stored, not acknowledged (retriable)
    REPLICATION_TIMEOUT = 36  # stored but not replicated in time (resend: idempotent)
    # Transactions: rolled back (nothing took effect; start again), or the outcome is not known
    # yet (the decision is durable or will be rolled back: ask with TX_RESOLVE).
    TX_ROLLED_BACK = 40
    TX_IN_DOUBT = 41
    INTERNAL = 50


class BatchFlag(IntEnum):
    CHUNK = 1
    DMQ = 2


# Frames that answer a request (carry ``r``).
REPLY_TYPES = frozenset(
    {FrameType.OK, FrameType.PRODUCE_ACK, FrameType.ADMIN_PART, FrameType.PONG, FrameType.HELLO_OK}
)


def error_frame(
    code: ErrorCode, msg: str, reply_to: int | None = None, fatal: bool = False
) -> dict[str, object]:
    """Build an ERROR frame; ``reply_to`` ties it to a request, ``fatal`` means the sender closes."""
    frame: dict[str, object] = {"t": FrameType.ERROR, "code": int(code), "msg": msg, "fatal": fatal}
    if reply_to is not None:
        frame["r"] = reply_to
    return frame


def split_kind(destination: str) -> tuple[str, str]:
    """``"queue:orders"`` -> ``("queue", "orders")``; a bare name is a topic."""
    kind, sep, name = destination.partition(":")
    if sep and kind in ("queue", "topic"):
        return kind, name
    return "topic", destination


def canonical(destination: str) -> str:
    """The canonical form ``kind:name`` used on the wire and in the log."""
    kind, name = split_kind(destination)
    return f"{kind}:{name}"


def is_reserved(destination: str) -> bool:
    return split_kind(destination)[1].startswith(RESERVED_PREFIX)
