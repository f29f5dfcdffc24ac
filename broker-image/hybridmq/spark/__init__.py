"""PySpark integration: the ``hybridmq`` data source and the delivery audit."""
