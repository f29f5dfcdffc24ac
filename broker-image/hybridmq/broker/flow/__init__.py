"""Credit-based flow control.

Two halves, end to end:

* consumer credit: ``ConsumerLink`` (``hybridmq.broker.destinations.delivery``) counts the records
  and bytes delivered but not yet acknowledged; an MM delivers only while the link has credit, the
  consumer's acks give it back;
* producer credit: ``BacklogGate`` (here) closes a partition's produce path while its backlog (log
  end minus the slowest cursor) exceeds the limit, so produce acks stop and the producers' pending
  windows (``Producer.is_blocked`` / ``try_send``) fill up. A slow consumer thus throttles its
  producers, and no buffer grows without bound.
"""

from hybridmq.broker.flow.backlog_gate import BacklogGate

__all__ = ["BacklogGate"]
