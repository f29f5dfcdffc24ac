"""The delivery audit: ``python -m hybridmq.spark.audit`` (see :mod:`hybridmq.spark.audit.cli`)."""

from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    from hybridmq.spark.audit.cli import main as cli_main

    return cli_main(argv)


__all__ = ["main"]
