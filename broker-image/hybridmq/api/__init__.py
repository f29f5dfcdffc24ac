"""Models shared by every HybridMQ process: custom resources, assignments and wire frames.

This package imports nothing else of the project, so the client, the broker and the operator can
all depend on it.
"""
