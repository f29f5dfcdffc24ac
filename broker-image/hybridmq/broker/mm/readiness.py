"""An MM's readiness: Ready only while it is caught up with every partition it holds.

A partition's backup is caught up when the table (the controller's commit of the primary's
proposal) counts this MM in sync; a primary is by definition. So a restarted MM is not Ready while
the copies it was given are still catching up, and a new MM that holds nothing is Ready at once.
The roll waits for it (one MM at a time, the next only once the previous one is Ready) and so does
the PodDisruptionBudget (an MM catching up counts as unavailable: a drain cannot evict a second MM
meanwhile). The controller gives an unready MM no new replicas; it loses none for being unready.
"""

from __future__ import annotations

from collections.abc import Mapping

from hybridmq.api.assignment import PartitionAssignment


def lagging(me: str, table: Mapping[str, PartitionAssignment]) -> list[str]:
    """The partitions whose copy on ``me`` is a backup the table does not count in sync."""
    return sorted(
        name for name, a in table.items() if me in a.replicas and a.primary != me and me not in a.in_sync
    )
