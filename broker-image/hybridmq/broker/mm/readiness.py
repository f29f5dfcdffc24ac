"""An MM's readiness: after a start, Ready only once it caught up with every partition it holds.

A partition's backup is caught up when the table (the controller's commit of the primary's
proposal) counts this MM in sync; a primary is by definition. Until the MM has its first table it
is not Ready (it does not know what it holds). An MM that holds nothing is Ready (a new, empty MM);
one given copies is not Ready until they are all in sync. Once it has held partitions all in sync
it stays Ready until it stops: copies it receives later (replacements while another MM is moved
off, primary balancing) are the partitions' concern (``Degraded``, the roll's
``WaitingForInSync``), and a healthy MM must not count as down for them.

So a restarted MM counts as unavailable until its first copies caught up: the roll waits for it
before the next MM goes, and so does the PodDisruptionBudget (a drain cannot evict a second MM
meanwhile). The controller gives an unready MM no new replicas; it loses none for being unready.
An empty MM given its first copies (the next MM's replacements, in a roll) goes unready while they
catch up, and its pod says so up to a few probes after the table counted them in sync: the roll
lets the MMs' readiness settle before it restarts an MM (``planner.roll.settle_restart``).
"""

from __future__ import annotations

from collections.abc import Mapping

from hybridmq.api.assignment import PartitionAssignment


def lagging(me: str, table: Mapping[str, PartitionAssignment]) -> list[str]:
    """The partitions whose copy on ``me`` is a backup the table does not count in sync."""
    return sorted(
        name for name, a in table.items() if me in a.replicas and a.primary != me and me not in a.in_sync
    )


class CatchUp:
    """Readiness since the MM's start (see the module docstring)."""

    def __init__(self, me: str) -> None:
        self.me = me
        self.caught_up = False  # held partitions, all in sync, at some point since the start

    def ready(self, table: Mapping[str, PartitionAssignment], known: bool = True) -> bool:
        """``known``: the table is the decider's (its first listing arrived), not an empty start."""
        if self.caught_up:
            return True
        if not known or lagging(self.me, table):
            return False
        self.caught_up = any(self.me in a.replicas for a in table.values())
        return True
