"""Issue 30's epoch-witness timelines (4, and 7's "new installation" shortcut), stepped through
the live scheduler's own parts on BOTH stores: the memory store and the service's ``RedisStore``
on the session's real redis-server (two key prefixes stand for two Redis masters, the old one
and the promoted replica, as a partition leaves them). The witness is tests/lifecycle.py's
ConfigMaps, the apiserver's record of elections (scheduler/service/witness.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest
import redis.asyncio as aioredis

from scheduler.kube.watch import HttpError
from scheduler.service.witness import Witness, WitnessError
from scheduler.state.base import Store
from scheduler.state.memory import MemoryStore
from scheduler.state.redis_store import RedisStore
from tests.builders import MakePod
from tests.clock import ManualClock
from tests.lifecycle import QUICK_RETRIES, Apiserver, ConfigMaps, Replica, node

Stores = Callable[[], Store]


@pytest.fixture(params=["memory", "redis"])
async def stores(request: pytest.FixtureRequest, clock: ManualClock) -> AsyncIterator[Stores]:
    """A maker of independent stores on one clock: MemoryStores, or RedisStores under their
    own prefixes on the session's redis-server, emptied first."""
    if request.param == "memory":
        yield lambda: MemoryStore(clock)
        return
    url = str(request.getfixturevalue("redis_server").url)
    client = aioredis.Redis.from_url(url)
    await client.flushall()
    await client.aclose()
    made: list[RedisStore] = []

    def make() -> Store:
        made.append(RedisStore.from_url(url, prefix=f"m{len(made) + 1}"))
        return made[-1]

    try:
        yield make
    finally:
        for store in made:
            await store.close()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(0.0)


def replica(
    api: Apiserver, store: Store, clock: ManualClock, holder: str, maps: ConfigMaps
) -> Replica:
    witness = Witness(maps, "topo-scheduler", "topo-scheduler")
    return Replica(
        api,
        store,
        clock,
        holder,
        wait_for_unknown_leader=True,
        witness=witness,
        tuning=QUICK_RETRIES,
    )


# ---- issue 30, 4: a transient 403 on the witness in the partition it exists for ----------------


async def test_issue30_4_a_transient_403_on_the_witness_does_not_give_two_leaders(
    stores: Stores, clock: ManualClock
) -> None:
    """A partition: a leads on the old master m1, which still takes its writes; the Sentinels
    promoted m2 and b is elected there, recorded in the witness, and waits one lease (its
    store's history is cut). a's renewal on m1 reads the witness while an authorization webhook
    times out (403). Before the fix that one 403 turned the witness off for good: every later
    renewal m1 accepted counted, a led on past b's wait, and both bound a pod on n/0."""
    api, maps = Apiserver(), ConfigMaps()
    a = replica(api, stores(), clock, "a", maps)
    b = replica(api, stores(), clock, "b", maps)
    assert await a.elect([node(1)]) == 1
    assert a.s.may_decide()  # a new installation: no wait
    assert await b.elect([node(1)]) == 1  # the promoted replica: a's lease and epoch lost
    assert not b.s.may_decide()  # its history is cut: one lease first (until 15 s)
    clock.now += 5.0
    maps.failure = HttpError(403, "forbidden: webhook authorizer timed out")
    await a.renewal()  # m1 accepts it; the witness cannot confirm a's epoch: it does not count
    maps.failure = None  # the webhook answers again
    clock.now += 5.0
    await a.renewal()  # m1 accepts it; the witness holds b's record: a is deposed
    await b.renewal()  # m2 accepts it, and the witness holds b's record: it counts
    clock.now += 5.0
    assert b.s.may_decide()
    # Each side has a pod to place on the one GPU; whoever may decide does.
    for r, name in ((a, "p"), (b, "q")):
        r.pending(MakePod().Name(name).Req(1).Obj())
        if r.s.may_decide():
            await r.step()
        await r.settle()
    assert api.binds == [("default/q", "n", "0")]
    assert not a.leadership.leading and a.held("default/p") is None


async def test_issue30_4_a_leader_whose_witness_stays_forbidden_stops_within_its_lease(
    stores: Stores, clock: ManualClock
) -> None:
    """Without a partition: a 403 that lasts (a Role removed) leaves the leader's lease its end,
    so it stops leading when that passes, and its next election fails (it does not lead
    without a record) until the witness can be written again."""
    api, maps = Apiserver(), ConfigMaps()
    store = stores()
    a = replica(api, store, clock, "a", maps)
    assert await a.elect([node(1)]) == 1
    maps.failure = HttpError(403, "forbidden")
    for _ in range(3):
        clock.now += 5.0
        await a.renewal()  # the store accepts; the witness cannot confirm: not counted
    assert not a.leadership.leading and not a.s.may_decide()
    with pytest.raises(WitnessError):
        await a.elect([node(1)])  # the lease again, but no record: no lead
    assert not a.s.may_decide()
    maps.failure = None
    assert await a.elect([node(1)]) == 1  # recorded: it leads again
    assert a.s.witness is not None and a.s.witness.recorded == "a|1"
