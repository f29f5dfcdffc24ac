"""Thin Kopf handlers, one module per concern. ``kopf run -m hybridmq_operator.handlers``.

* ``startup``: operator settings (storage of Kopf's own state, finalizer name, peering).
* ``indexes``: in-memory indexes of broker pods, MM Leases and Partitions, fed by Kopf's watches,
  and the events that wake a cluster's daemon when what it reads changes.
* ``silent``: the per-event handlers whose successes are not logged (a line per watch event).
* ``children``: BrokerCluster create/update/resume → apply the child objects.
* ``partitions``: a daemon per BrokerCluster: observe, plan, apply, every ~250 ms while anything is
  in flight, else when a watch event or a Lease's end calls for it (``quiet``);
  each round then runs ``scale_down`` (refuse or finish MM scale-downs) and ``status`` (the
  BrokerCluster status and its Warning events; ``cluster_status`` builds the status dict).
* ``cleanup``: BrokerCluster deletion releases its Partitions.
* ``orphans``: a Partition naming a BrokerCluster that does not exist gets a status saying so.
* ``users``: BrokerUsers -> the CMs' users Secret and the users' Ready conditions.
"""

from hybridmq_operator.handlers import children, cleanup, indexes, orphans, partitions, startup, users

__all__ = ["children", "cleanup", "indexes", "orphans", "partitions", "startup", "users"]
