"""Transacted sessions: everything a session produced and consumed since its last commit takes
effect together or not at all (docs/transactions.md).

* ``participant.py``: the MM side, per partition: prepare (produced batches kept inside a
  ``TxPrepare`` control record, consumed records held for the transaction), the coordinator
  record (``TxDecision``), commit and rollback (``TxEnd``), recovery after a failover.
* ``mm_handler.py``: the MM's TX_PREPARE / TX_DECIDE / TX_END / TX_INDOUBT frames.
* ``coordinator.py``: the CM as transaction manager (one-phase or two-phase commit).
* ``resolver.py``: every CM resolves prepared transactions left behind by a dead CM.
* ``fault.py``: a test-only pause at a protocol step (``HYBRIDMQ_TX_PAUSE``).
"""
