"""HybridMQ: a partitioned, replicated message broker for Kubernetes with hybrid partitions."""

__version__ = "0.1.0"
