"""Issue 30, found by the simulation's soak (seeds 1326 and 56736): a preemptor's victim that an
etcd restore brought back running after its eviction. Stepped by hand through the live scheduler's
own parts on BOTH stores (the ``backend`` fixture of test_pod_lifecycle.py: the memory store and
the real Redis store), against the fake apiserver of tests/lifecycle.py.

On the code before each fix the preemptor waited for the victim to leave, which it never would,
until its nomination's hold ran out (preemption.holdSeconds, 5 minutes), and the GPUs the
nomination held were kept from every pod of lower priority meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from scheduler.core.model.objects import PodInput
from scheduler.service.podbook import Stage
from tests.builders import MakePod
from tests.integration import test_pod_lifecycle as lifecycle_tests
from tests.integration.test_pod_lifecycle import Backend, run
from tests.lifecycle import Replica, node

# The stores of test_pod_lifecycle.py: memory, and the session's real redis-server.
redis_url = lifecycle_tests.redis_url
backend = lifecycle_tests.backend


async def turn(r: Replica) -> None:
    """The loop's next turns (``Scheduler.run``): its timers, then, the pods' backoff run out
    (2 s, the lease renewed), every pod ready."""
    if r.s.preemptions.tick():
        r.s.queue.on_cluster_event()
    r.clock.now += 2.0
    await r.renew()
    await run(r)


async def preempted(r: Replica) -> tuple[PodInput, PodInput, Callable[[], None]]:
    """v holds node n's only GPU; p (high priority) comes, and etcd is backed up (v running,
    p pending). p preempts v: v is evicted and the bound watch shows it terminating. Returns
    v, p and the restore from that backup: v running again, p pending (its nominatedNodeName
    gone), and both watches re-list."""
    api = r.api
    api.version = 1000
    v = api.create(MakePod().Name("v").Req(1).Bound("n", "0").Obj())
    await r.elect([node(1)], [v])
    p = r.pending(MakePod().Name("p").Req(1).Priority(1000).Obj())
    pods, version = dict(api.pods), api.version
    await run(r)
    assert api.evictions == [v.key] and set(r.s.state.nominations) == {p.key}
    r.s.intake.bound_event("MODIFIED", api.pods[v.key])  # v terminating
    await run(r)
    assert r.s.book.get(p.key).nomination is not None  # type: ignore[union-attr]

    def restore() -> None:
        api.pods, api.version = dict(pods), version
        api.nominated.clear()
        r.s.intake.replace_pending([api.pods[p.key]], api.version)
        r.s.intake.replace_bound(*r.bound_list())

    return v, p, restore


async def v_ends_and_p_binds(r: Replica, v: PodInput, p: PodInput) -> None:
    """v ends; p binds on the GPU its last nomination held."""
    api = r.api
    api.pods[v.key] = api.stamp(msgspec.structs.replace(api.pods[v.key], deleting=True))
    r.s.intake.bound_event("MODIFIED", api.pods[v.key])
    r.s.intake.bound_event("DELETED", api.stamp(api.pods.pop(v.key)))
    await r.settle()  # its last victim gone: p is ready at once
    await run(r)
    assert api.pods[p.key].node_name == "n"
    assert r.s.book.stage(p.key) in (Stage.ASSUMED, Stage.BOUND)
    assert r.s.sizes()["preemptions"]["leaving"] == 0


async def test_a_victim_an_etcd_restore_brought_back_is_preempted_again(
    backend: Backend,
) -> None:
    """p preempts v (``preempted``); etcd is restored from the backup taken before: the
    LISTs' version is below the book's, a new era. p's plan waits on a pod that will not
    leave now. kube-scheduler waits only while a victim is terminating, and otherwise
    preempts again: p's nomination ends and p evicts v again."""
    r = backend.live()
    v, p, restore = await preempted(r)
    restore()
    assert r.s.book.era == 1 and not r.s.intake.between_eras
    await turn(r)
    assert r.api.evictions == [v.key, v.key]
    entry = r.s.book.get(p.key)
    assert entry is not None and entry.nomination is not None and entry.nomination.era == 1
    assert r.api.nominated == {p.key: "n"}
    await v_ends_and_p_binds(r, v, p)


async def test_a_victim_a_second_restore_from_the_same_backup_brought_back_is_preempted_again(
    backend: Backend,
) -> None:
    """Soak seed 56736. As above, the first restore begins a new era and p evicts v again, its
    eviction answered; 0.2 s later etcd is restored again from the same backup, before the
    watches told the leader of any version the first restore's history reached (v's eviction,
    p's nominatedNodeName): the LISTs are at the backup's version, no lower than the book's
    newest, so the second restore begins no era, and v is running again. A bound LIST begun
    after v's eviction was answered shows v running: it was brought back, and p evicts it a
    third time. Before the fix p waited for v until its hold ran out."""
    r = backend.live()
    v, p, restore = await preempted(r)
    restore()  # a new era, and p evicts v again
    await turn(r)
    assert r.api.evictions == [v.key, v.key] and r.s.book.era == 1
    restore()  # the watches told nothing since: no new era
    assert r.s.book.era == 1 and not r.s.intake.between_eras
    await turn(r)
    assert r.api.evictions == [v.key, v.key, v.key]
    entry = r.s.book.get(p.key)
    assert entry is not None and entry.nomination is not None
    assert r.api.nominated == {p.key: "n"}
    await v_ends_and_p_binds(r, v, p)
