"""Process plumbing shared by ``hybridmq cm`` and ``hybridmq mm``: uvloop, logging, signals."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from hybridmq.broker.log_summary import DEFAULT_INTERVAL_S, configure


def install_uvloop() -> None:
    try:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        pass


def setup_logging(level: str = "INFO", summary_interval: float = DEFAULT_INTERVAL_S) -> None:
    """stderr logging; repeated records are summarized (``log_summary.py``) on stderr as on
    ``topic:_LOG``: a flood costs a counter, not a line each. ``summary_interval`` 0 turns it off."""
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    configure(interval=summary_interval)


async def serve_until_signal(start: Callable[[], Awaitable[Any]], stop: Callable[[], Awaitable[Any]]) -> None:
    await start()
    done = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, done.set)
    await done.wait()
    await stop()


def run(main: Coroutine[Any, Any, Any], name: str = "node") -> None:
    """Run the server coroutine on uvloop. ``HYBRIDMQ_PROFILE=<dir>`` writes a cProfile of the whole
    run to ``<dir>/<name>.prof`` on a clean exit (used to find where the time goes)."""
    install_uvloop()
    profile_dir = os.environ.get("HYBRIDMQ_PROFILE")
    if not profile_dir:
        asyncio.run(main)
        return
    import cProfile

    prof = cProfile.Profile()
    prof.enable()
    try:
        asyncio.run(main)
    finally:
        prof.disable()
        prof.dump_stats(os.path.join(profile_dir, f"{name}.prof"))
