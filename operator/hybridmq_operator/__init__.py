"""The HybridMQ operator: Kopf handlers around a pure planner (``hybridmq_operator.planner``)."""
