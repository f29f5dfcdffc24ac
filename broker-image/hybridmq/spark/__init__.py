"""PySpark integration: the ``hybridmq`` data source and the delivery audit (DESIGN.md §6)."""
