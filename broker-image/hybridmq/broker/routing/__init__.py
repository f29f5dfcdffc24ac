"""Where a CM sends what concerns a partition (``Routes``)."""

from hybridmq.broker.routing.routes import Link, Route, Routes, Unroutable

__all__ = ["Link", "Route", "Routes", "Unroutable"]
