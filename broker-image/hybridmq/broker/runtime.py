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


async def serve_until_signal(
    start: Callable[[], Awaitable[Any]],
    stop: Callable[[], Awaitable[Any]],
    drain: Callable[[], Awaitable[Any]] | None = None,
) -> None:
    """Serve until SIGTERM or SIGINT. SIGTERM is a planned stop (a roll, a drain): ``drain`` runs
    first (an MM's graceful handoff); SIGINT (Ctrl-C, a local cluster's teardown) stops at once."""
    await start()
    done = asyncio.Event()
    planned = False
    loop = asyncio.get_running_loop()

    def on_term() -> None:
        nonlocal planned
        planned = True
        done.set()

    loop.add_signal_handler(signal.SIGTERM, on_term)
    loop.add_signal_handler(signal.SIGINT, done.set)
    await done.wait()
    if planned and drain is not None:
        drain_task = asyncio.ensure_future(drain())
        interrupted = asyncio.ensure_future(_signalled(loop))
        await asyncio.wait({drain_task, interrupted}, return_when=asyncio.FIRST_COMPLETED)
        for t in (drain_task, interrupted):
            t.cancel()
        await asyncio.gather(drain_task, interrupted, return_exceptions=True)
    await stop()


async def _signalled(loop: asyncio.AbstractEventLoop) -> None:
    """Returns at the next SIGTERM or SIGINT (a second signal cuts a drain short)."""
    again = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, again.set)
    await again.wait()


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
