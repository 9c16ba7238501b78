"""Real Redis failures for tests, on the real redis-server (no mock of Redis).

- ``busy(url)``: Redis runs a script that never ends; every other client's command gets
  ``BUSY`` until the script is killed (what a long script, or a huge reconcile of another
  client, does to everyone else).
- ``out_of_memory(url)``: ``maxmemory`` below what Redis uses: a command or script that would
  add data gets ``OOM``.

Both restore the server's configuration on the way out.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import redis.asyncio as aioredis
from redis.exceptions import ResponseError


@contextlib.asynccontextmanager
async def busy(url: str) -> AsyncIterator[None]:
    admin = aioredis.Redis.from_url(url)
    looper = aioredis.Redis.from_url(url)
    threshold = str((await admin.config_get("busy-reply-threshold"))["busy-reply-threshold"])
    await admin.config_set("busy-reply-threshold", 1)  # ms before others are answered BUSY

    async def run_forever() -> None:
        await looper.eval("while true do end", 0)

    script = asyncio.create_task(run_forever())
    try:
        while True:
            try:
                await admin.ping()  # answered until the script has started
            except ResponseError as exc:
                if str(exc).startswith("BUSY"):
                    break
                raise
            await asyncio.sleep(0.005)
        yield
    finally:
        await admin.script_kill()
        with contextlib.suppress(ResponseError):  # "Script killed by user with SCRIPT KILL"
            await script
        await admin.config_set("busy-reply-threshold", threshold)
        await looper.aclose()
        await admin.aclose()


@contextlib.asynccontextmanager
async def out_of_memory(url: str) -> AsyncIterator[None]:
    admin = aioredis.Redis.from_url(url)
    limit = str((await admin.config_get("maxmemory"))["maxmemory"])
    await admin.config_set("maxmemory", 1)
    try:
        yield
    finally:
        await admin.config_set("maxmemory", limit)
        await admin.aclose()
