"""The ``hybridmq`` command line."""
