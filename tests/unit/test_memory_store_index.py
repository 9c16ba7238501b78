"""MemoryStore's per-card index: a reservation reads only the GPUs its claims name.

The check once walked every record's shares on every ``reserve`` (O(all pods) per pod). These
tests pin that it no longer reads the records at all, and that its answers are still exactly the
full walk's, over random sequences of reservations (``reserve_each``), binds, releases and
reconciles; ``reserve_each`` also gives what one ``reserve`` per unit would.
"""

from __future__ import annotations

from typing import Any, NoReturn

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.state.base import Claim, Conflict, Record, ShareClaim
from scheduler.state.memory import MemoryStore
from tests.clock import ManualClock

TTL = 10_000


class NoWalk(dict[str, Record]):
    """Pod records that refuse to be walked: single lookups and writes only."""

    def _walked(self, *_: Any) -> NoReturn:
        raise AssertionError("the records were walked")

    items = values = keys = __iter__ = _walked


def share(index: int, core: int, qos: str = "", mem: int = 0) -> ShareClaim:
    return ShareClaim(index, core, mem, 0, qos, cap_memory_mib=1024, cap_sgpu=4)


async def test_a_reservation_does_not_walk_the_records() -> None:
    store = MemoryStore(ManualClock(0.0))
    e = await store.acquire("a", TTL)
    assert e is not None
    for i in range(200):
        node = f"n{i}"
        await store.reserve("a", e, [Claim(f"s{i}", f"d/s{i}", node, shares=(share(0, 60),))])
        await store.reserve("a", e, [Claim(f"w{i}", f"d/w{i}", node, (1,))])
    store._records = NoWalk(store._records)
    out = await store.reserve_each(
        "a",
        e,
        [
            [Claim("x", "d/x", "n7", shares=(share(0, 50),))],
            [Claim("y", "d/y", "n7", shares=(share(0, 40, "burst-share"),))],
            [Claim("z", "d/z", "n7", (0,))],
            [
                Claim("g1", "d/g1", "n8", (2,), gang="d/g"),
                Claim("g2", "d/g2", "n9", (2,), gang="d/g"),
            ],
        ],
    )
    assert out == [
        "GPU 0 on node n7 has no room for the share",
        None,
        "GPU 0 on node n7 is shared by other pods",
        None,
    ]
    await store.release("a", e, ["s7", "y", "g1"])
    await store.reserve("a", e, [Claim("z", "d/z", "n7", (0,))])
    assert store._records["z"].claim.devices == (0,)


# ---- the full walk, as it was, for reference ---------------------------------------------------


async def full_walk_check(store: MemoryStore, claims: list[Claim]) -> str | None:
    """The check before the index, over the store's public reads: every record's shares but
    those of the unit's own pods (their records are replaced)."""
    mine = {c.uid for c in claims}
    records = await store.records()
    owners: dict[tuple[str, int], str] = {}
    for node in {c.node for c in claims}:
        owners.update(
            {(node, i): o.uid for i, o in (await store.owners(node)).items() if o.uid not in mine}
        )
    taken: dict[tuple[str, int], str] = {}
    shared: dict[tuple[str, int], list[tuple[str, int, int, int, str]]] = {}
    for uid, rec in records.items():
        if uid in mine:
            continue
        for s in rec.claim.shares:
            shared.setdefault((rec.claim.node, s.index), []).append(
                (uid, s.core, s.memory_mib, s.sgpu, s.qos)
            )
    for claim in claims:
        for index in claim.devices:
            key = (claim.node, index)
            owner = owners.get(key) or taken.get(key)
            if owner is not None and owner != claim.uid:
                return f"GPU {index} on node {claim.node} is held by pod UID {owner}"
            if any(u != claim.uid for u, *_ in shared.get(key, [])):
                return f"GPU {index} on node {claim.node} is shared by other pods"
            taken[key] = claim.uid
        for s in claim.shares:
            key = (claim.node, s.index)
            owner = owners.get(key) or taken.get(key)
            if owner is not None and owner != claim.uid:
                return f"GPU {s.index} on node {claim.node} is held whole by pod UID {owner}"
            users = [u for u in shared.get(key, []) if u[0] != claim.uid]
            core = sum(u[1] for u in users) + s.core
            memory = sum(u[2] for u in users) + s.memory_mib
            sgpu = sum(u[3] for u in users) + s.sgpu
            qos = {u[4] for u in users if u[4]}
            if core > 100 or memory > s.cap_memory_mib or sgpu > s.cap_sgpu:
                return f"GPU {s.index} on node {claim.node} has no room for the share"
            if s.qos and qos - {s.qos}:
                return f"GPU {s.index} on node {claim.node} serves QoS {sorted(qos)[0]}"
            shared.setdefault(key, []).append((claim.uid, s.core, s.memory_mib, s.sgpu, s.qos))
    return None


UIDS = [f"u{i}" for i in range(8)]


@st.composite
def claims(draw: st.DrawFn) -> Claim:
    uid = draw(st.sampled_from(UIDS))
    devices = tuple(sorted(draw(st.sets(st.integers(0, 3), max_size=2))))
    shares = tuple(
        ShareClaim(
            index,
            draw(st.sampled_from([10, 30, 50, 70])),
            draw(st.sampled_from([0, 300, 600])),
            draw(st.integers(0, 2)),
            draw(st.sampled_from(["", "fixed-share", "burst-share"])),
            cap_memory_mib=1024,
            cap_sgpu=4,
        )
        for index in sorted(draw(st.sets(st.integers(0, 3), max_size=2)))
    )
    gang = draw(st.sampled_from(["", "d/g", "d/h"]))
    return Claim(
        uid,
        f"d/{uid}",
        draw(st.sampled_from(["n", "m"])),
        devices,
        shares,
        gang,
        draw(st.integers(0, 3)) if gang else 0,
    )


units = st.lists(st.lists(claims(), min_size=1, max_size=3), max_size=4)
uid_lists = st.lists(st.sampled_from(UIDS), max_size=4)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("reserve_each"), units),
        st.tuples(st.just("mark_bound"), uid_lists),
        st.tuples(st.just("release"), uid_lists),
        st.tuples(st.just("reconcile"), uid_lists),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=operations)
async def test_the_index_answers_as_the_full_walk(ops: list[tuple[str, Any]]) -> None:
    clock = ManualClock(0.0)
    indexed, twin = MemoryStore(clock), MemoryStore(clock)
    e = await indexed.acquire("a", TTL)
    assert e is not None and await twin.acquire("a", TTL) == e
    for op, arg in ops:
        if op == "reserve_each":
            # The twin reserves the units one call each, as the full walk says they go.
            expected: list[str | None] = []
            for unit in arg:
                problem = await full_walk_check(twin, unit)
                expected.append(problem)
                if problem is None:
                    await twin.reserve("a", e, unit)
                else:
                    try:
                        await twin.reserve("a", e, unit)
                    except Conflict as exc:
                        assert str(exc) == problem
                    else:
                        raise AssertionError(f"{unit} was written despite: {problem}")
            assert await indexed.reserve_each("a", e, arg) == expected
        elif op == "reconcile":
            # The named pods are the truth, bound; nothing else is kept.
            records = await indexed.records()
            truth = [records[u].claim for u in dict.fromkeys(arg) if u in records]
            for store in (indexed, twin):
                await store.reconcile("a", e, truth, [])
        else:
            for store in (indexed, twin):
                await getattr(store, op)("a", e, arg)
        assert await indexed.records() == await twin.records()
        assert await indexed.gangs() == await twin.gangs()
        for node in ("n", "m"):
            assert await indexed.owners(node) == await twin.owners(node)
