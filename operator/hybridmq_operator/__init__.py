"""The HybridMQ operator: Kopf handlers around a pure planner (``hybridmq.planner``)."""
