"""Taking over a large store (issue 12, item 10), on a real redis-server.

The first reconcile after an election used to be one Lua call: Redis blocked for all of it, the
caller's 2 s socket timeout ran out at some 20,000 bound pods, and the lease was not renewed
meanwhile, so no replica could take over a big cluster. Now it is a sequence of fenced calls of
at most ``chunk`` items, and the lease is renewed while it runs.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import redis.asyncio as aioredis

from scheduler.service.leader import Leadership, LeaseTiming
from scheduler.state.base import Claim, Fenced
from scheduler.state.redis_store import RedisStore

TTL_MS = 60_000


def claims(n: int, epoch_tag: str = "") -> list[Claim]:
    """``n`` one-GPU pods on nodes of 8; every fourth group of four is a gang of 4."""
    out = []
    for i in range(n):
        gang = f"default/job-{i // 4}" if (i // 4) % 4 == 0 else ""
        out.append(
            Claim(
                uid=f"u{i}{epoch_tag}",
                pod=f"default/p{i}",
                node=f"n{i // 8}",
                devices=(i % 8,),
                gang=gang,
                replicas=4 if gang else 0,
                resources=(("nvidia.com/gpu", 1),),
            )
        )
    return out


async def dump(client: aioredis.Redis, prefix: str) -> dict[str, Any]:
    """Every key of the store under ``prefix``, with the prefix cut, and its value."""
    out: dict[str, Any] = {}
    async for key in client.scan_iter(match=f"{prefix}:*", count=1000):
        name = key.decode()
        kind = (await client.type(name)).decode()
        short = name.removeprefix(f"{prefix}:")
        if kind == "hash":
            out[short] = await client.hgetall(name)
        elif kind == "set":
            out[short] = await client.smembers(name)
        elif short not in ("lease", "epoch"):
            out[short] = await client.get(name)
    return out


async def scenario(url: str, prefix: str, chunk: int) -> tuple[dict[str, Any], Any, int]:
    """A previous leader recorded 3,000 pods and some reservations; the new one reconciles a
    truth where 300 are gone, 300 are new, and one pending pod's reservation is kept."""
    client = aioredis.Redis.from_url(url)
    old = RedisStore(aioredis.Redis.from_url(url), prefix=prefix, chunk=chunk)
    new = RedisStore(aioredis.Redis.from_url(url), prefix=prefix, chunk=chunk)
    try:
        e1 = await old.acquire("old", TTL_MS)
        assert e1 is not None
        before = claims(3000)
        await old.reconcile("old", e1, before, [], {f"n{i}": f'{{"i":{i}}}' for i in range(400)})
        await old.reserve("old", e1, [Claim("wait", "default/wait", "n999", (0,))])
        await old.reserve("old", e1, [Claim("gone", "default/gone", "n999", (1,))])
        await old.release_lease("old", e1)
        e2 = await new.acquire("new", TTL_MS)
        assert e2 is not None
        truth = claims(3000)[300:] + claims(300, "-new")
        # Two pods claiming one GPU: reported, as by a one-call reconcile.
        truth.append(Claim("twin", "default/twin", "n50", (0,)))
        nodes = {f"n{i}": f'{{"i":{i}}}' for i in range(100, 500)}
        new.reconcile_calls = 0
        report = await new.reconcile("new", e2, truth, ["wait"], nodes)
        return await dump(client, prefix), report, new.reconcile_calls
    finally:
        await old.close()
        await new.close()
        await client.aclose()


async def test_a_chunked_reconcile_equals_a_one_call_reconcile(redis_server: Any) -> None:
    client = aioredis.Redis.from_url(redis_server.url)
    await client.flushall()
    await client.aclose()
    whole, whole_report, whole_calls = await scenario(redis_server.url, "one", 10**9)
    chunked, chunked_report, chunked_calls = await scenario(redis_server.url, "many", 100)
    assert whole_calls == 5  # free, truth, gangs cleared, gangs written, nodes
    assert chunked_calls > 40  # 3,301 claims alone are 34 calls
    assert chunked_report == whole_report
    assert (chunked_report.added, chunked_report.freed, chunked_report.kept) == (301, 301, 1)
    assert chunked_report.conflicts == (
        "pod default/twin: GPU 0 on node n50 is held by pod UID u400",
    )
    assert chunked == whole
    # Spot checks of what both hold: the pending pod's reservation, the dropped ones, a gang.
    assert b"wait" in chunked["pods"] and b"gone" not in chunked["pods"]
    assert b"u0" not in chunked["pods"] and b"u300" in chunked["pods"]
    assert chunked["gang:default/job-80"][b"members"] == b"u320,u321,u322,u323"
    assert chunked["gang:default/job-80"][b"state"] == b"bound"
    # job-0's members were all replaced by new pods of the same gang.
    assert chunked["gang:default/job-0"][b"members"] == b"u0-new,u1-new,u2-new,u3-new"
    assert set(chunked["nodes"]) == {f"n{i}".encode() for i in range(100, 500)}


class SlowStore(RedisStore):
    """Each reconcile call waits a little first, as on a loaded machine with a big store."""

    async def _fenced(self, script: Any, holder: str, epoch: int, items: list[Any]) -> Any:
        await asyncio.sleep(0.02)
        return await super()._fenced(script, holder, epoch, items)


async def test_the_lease_is_renewed_while_the_first_reconcile_runs(redis_server: Any) -> None:
    client = aioredis.Redis.from_url(redis_server.url)
    await client.flushall()
    store = SlowStore(aioredis.Redis.from_url(redis_server.url), prefix="L", chunk=50)
    # A lease of 0.6 s; the reconcile of 2,000 pods takes 80+ calls of 20 ms: about 2 s.
    leadership = Leadership(
        store, "new", LeaseTiming(lease_s=0.6, renew_s=0.15, retry_s=0.05), time.monotonic
    )
    truth = claims(2000)
    done = asyncio.Event()
    outcome: dict[str, Any] = {}

    async def on_elected(epoch: int) -> None:
        started = time.monotonic()
        try:
            outcome["report"] = await store.reconcile("new", epoch, truth, [])
        except Fenced as exc:  # what the lease lapsing mid-way did without renewals
            outcome["fenced"] = str(exc)
            raise
        finally:
            outcome["seconds"] = time.monotonic() - started
            outcome["calls"] = store.reconcile_calls
            done.set()

    async def on_lost() -> None:
        outcome["lost"] = True

    task = asyncio.create_task(leadership.run(on_elected, on_lost))
    try:
        await asyncio.wait_for(done.wait(), 30)
        assert "fenced" not in outcome, outcome
        assert outcome["seconds"] > 0.6  # longer than the lease: renewals kept it
        assert outcome["calls"] > 40  # in several calls
        assert outcome["report"].added == 2000
        assert leadership.leading and "lost" not in outcome
        assert await client.pttl("L:lease") > 0
        assert len(await client.hkeys("L:pods")) == 2000
    finally:
        await leadership.release()
        await task
        await store.close()
        await client.aclose()
