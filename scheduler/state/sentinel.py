"""Finding the Redis master through Sentinels (redis-py's asyncio Sentinel client).

``run.redisSentinel`` names the master (``masterName``) and the Sentinels (``addresses``,
``host:port``); the password and database come from ``run.redisUrl``
(``redis://[[user]:PASSWORD@]ignored[:port]/DB``: its host and port are not used), or none and
database 0 without one. The Sentinels are asked with the same user and password (deploy/'s
Sentinels require it). Sentinels are asked in turn and one that is down or does not know the
master is skipped; the client asks again whenever it opens a connection, and drops a connection
whose server answers READONLY (a master demoted to replica), so it follows a failover to the new
master. A call that fails meanwhile fails like any Redis call (the store's Unavailable).
"""

from __future__ import annotations

import redis.asyncio as aioredis
from redis.asyncio.connection import parse_url
from redis.asyncio.sentinel import Sentinel

# Asking a Sentinel is quick or it is down: don't wait long before trying the next one. The
# default of the setting run.tuning.sentinelTimeoutSeconds.
SENTINEL_TIMEOUT_S = 0.5


def sentinel_address(text: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too); ValueError says what is wrong."""
    host, sep, port = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host:
        raise ValueError(f"{text!r} is not host:port")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{text!r}: the port must be a number from 1 to 65535")
    return host, int(port)


def sentinel_credentials(url: str) -> tuple[str | None, str | None, int]:
    """(user, password, database) from ``redis://[[user]:PASSWORD@]host[:port]/DB``; an empty
    URL: none, none, 0. ValueError says what is wrong."""
    if not url:
        return None, None, 0
    if not url.startswith("redis://"):
        raise ValueError(
            "with redisSentinel set, the URL only carries the password and database: "
            "redis://:PASSWORD@ignored/0 (no rediss:// or unix://)"
        )
    try:
        parts = parse_url(url)
    except ValueError as exc:
        raise ValueError(f"not a Redis URL: {exc}") from None
    db = parts.get("db", 0)
    return parts.get("username"), parts.get("password"), int(db if db is not None else 0)


def sentinel_client(
    master_name: str,
    addresses: tuple[str, ...],
    url: str,
    timeout_s: float,
    sentinel_timeout_s: float,
) -> tuple[aioredis.Redis, Sentinel]:
    """A client of the master named ``master_name``, found through the Sentinels, and the
    Sentinels' own client (to close with it). ``timeout_s`` bounds a call to the master,
    ``sentinel_timeout_s`` one to a Sentinel."""
    user, password, db = sentinel_credentials(url)
    auth = {"username": user, "password": password}
    sentinels = Sentinel(  # type: ignore[no-untyped-call]
        [sentinel_address(a) for a in addresses],
        sentinel_kwargs={
            **auth,
            "socket_timeout": sentinel_timeout_s,
            "socket_connect_timeout": sentinel_timeout_s,
        },
        **auth,
        db=db,
    )
    client: aioredis.Redis = sentinels.master_for(
        master_name, socket_timeout=timeout_s, socket_connect_timeout=timeout_s
    )
    return client, sentinels
