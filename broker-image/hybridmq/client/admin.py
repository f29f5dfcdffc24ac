"""Admin commands (the ``_ADMIN`` destination's protocol): ADMIN frame -> composite reply.

A composite reply is a series of ADMIN_PART frames, each saying its index ``i`` and how many parts
to expect (``of``); ``admin`` returns the parts in order once all arrived. Commands: ``stats`` (this
CM), ``directory``, ``sessions`` (one part per session), ``mm-stats`` (one part per MM).
"""

from __future__ import annotations

import asyncio
from typing import Any

from hybridmq.api.frames import FrameType
from hybridmq.client.connection import ClientError, connect
from hybridmq.client.transport import Transport
from hybridmq.protocol import RemoteError
from hybridmq.protocol.tls import SslOption


async def admin(
    bootstrap: str | list[str] | None,
    command: str,
    *,
    user: str | None = None,
    password: str | None = None,
    ssl: SslOption | Transport = None,
) -> list[Any]:
    conn, _ = await connect(bootstrap, user=user, password=password, ssl=ssl)
    runner = asyncio.create_task(conn.run())
    try:
        reply = await conn.request({"t": FrameType.ADMIN, "cmd": command})
        return list(reply["parts"])
    except RemoteError as exc:
        raise ClientError(exc.code, exc.msg) from None
    finally:
        conn.close()
        runner.cancel()
