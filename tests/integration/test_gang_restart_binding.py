"""A gang restarted while its Bindings are in flight (sim seed 11505), stepped by hand on BOTH
stores (the ``backend`` fixture of test_pod_lifecycle.py) against the fake apiserver of
tests/lifecycle.py.

PodGroup gang job (minimum 3) is decided and its three Bindings wait (an etcd stall); the job
restarts before they are answered: job-a0..a2 are deleted, job-b0..b2 created under the same
PodGroup. Before the fix the assumed job-a members met the minimum, so job-b0 was bound alone
as surplus on the one free GPU; the job-a Bindings then failed (404) and the gang was 1 of 3
bound. Now a minimum is met only by members the bound watch shows: the new members wait, all or
none, and are placed whole once the old Bindings have failed.
"""

from __future__ import annotations

import asyncio

from scheduler.core.model import names
from scheduler.core.model.objects import PodGroupInput, PodInput
from scheduler.service.podbook import Stage
from tests.builders import MakePod
from tests.integration import test_pod_lifecycle as lifecycle_tests
from tests.integration.test_pod_lifecycle import Backend, run
from tests.lifecycle import Replica, node, until

redis_url = lifecycle_tests.redis_url
backend = lifecycle_tests.backend


def member(name: str) -> PodInput:
    return MakePod().Name(name).Req(1).Label(names.POD_GROUP_LABEL, "job").Obj()


async def restarted(r: Replica, size: int, gpus: int) -> tuple[list[str], list[str]]:
    """PodGroup gang job (minimum ``size``) decided on a node of ``gpus`` GPUs, its Bindings
    held at their gates; then restarted before they are answered: the old pods deleted (the
    pending watch says they left) and as many new ones created, not placed yet. Returns the
    old keys and the new."""
    await r.elect([node(gpus)])
    group = PodGroupInput(names.POD_GROUP_API, "default", "job", min_member=size, uid="pg")
    r.s.state.inputs.pod_groups.put(group)
    old = [f"default/job-a{i}" for i in range(size)]
    new = [f"default/job-b{i}" for i in range(size)]
    for key in old:
        r.api.gates[key] = asyncio.Event()  # their Bindings wait
    for i in range(size):
        r.pending(member(f"job-a{i}"))
    while await r.step() is not None:
        pass
    await asyncio.sleep(0)
    assert all(r.held(key) is not None for key in old) and r.api.binds == []
    for key in old:
        r.s.intake.pending_event("DELETED", r.api.delete(key))
    for i in range(size):
        r.pending(member(f"job-b{i}"))
    while await r.step() is not None:
        pass
    assert all(r.held(key) is None for key in new)
    return old, new


async def test_a_gang_restarted_under_its_bindings_is_not_bound_in_part(backend: Backend) -> None:
    r = backend.live()
    old, new = await restarted(r, 3, 4)
    explanation = r.s.explain("default/job-b0")
    assert explanation is not None and "beyond its minimum" not in explanation.reason
    # The old Bindings are answered 404: their GPUs go, and the new gang is placed whole.
    for key in old:
        r.api.gates[key].set()
    await r.settle()
    assert all(r.held(key) is None for key in old)
    r.clock.now += 10.0  # the new members' backoff
    await r.renew()
    await run(r)
    assert sorted(k for k, _, _ in r.api.binds) == new


async def test_members_that_may_be_gone_are_not_decided_with_the_new_ones(
    backend: Backend,
) -> None:
    """Soak seed 35133: the old members' Bindings fail without landing (refused) after the
    pending watch said they left, so the book has them pending again until a read says they
    are gone. Decided with the new members before that read answers, the gang's plan placed
    the ghosts on two of the three free GPUs and one new member on the third: the ghosts'
    Bindings found them gone, and the new member was bound alone, 1 of its minimum 2. The
    gang now waits for the read (reads failing here: it waits as long)."""
    r = backend.live()
    old, new = await restarted(r, 2, 3)
    # The old Bindings are refused: none of them landed, and the reads that would say the
    # pods are gone fail for now.
    r.api.reads_fail = True
    for key in old:
        r.api.refuse[key] = 403
        r.api.gates[key].set()
    await until(lambda: not binding(r, old))
    for key in old:
        del r.api.refuse[key]
    r.clock.now += 10.0  # every member's backoff
    await r.renew()
    while await r.step() is not None:
        pass
    await until(lambda: not binding(r, new))
    bound = sorted(k for k, _, _ in r.api.binds)
    assert bound == [], bound  # neither the ghosts nor one new member alone
    # The reads answer: the old pods are gone, and the new gang is placed whole.
    r.api.reads_fail = False
    await until(lambda: all(r.s.book.get(key) is None for key in old))
    r.clock.now += 10.0
    await r.renew()
    await run(r)
    assert sorted(k for k, _, _ in r.api.binds) == new


def binding(r: Replica, keys: list[str]) -> list[str]:
    """The keys whose Binding is in flight (or being answered)."""
    return [k for k in keys if (e := r.s.book.get(k)) is not None and e.stage is Stage.BINDING]
