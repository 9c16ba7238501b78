"""Issue 30, found by the simulation's soak (seed 51148): a Binding's outcome told to its pod's
entry after the pod was decided again. Stepped by hand through the live scheduler's own parts
on BOTH stores (the ``backend`` fixture of test_pod_lifecycle.py: the memory store and the real
Redis store), against the fake apiserver of tests/lifecycle.py.

On the code before the fix the old Binding's refusal forgot the GPU the new decision's Binding
was about to land on, and b was bound there too.
"""

from __future__ import annotations

import asyncio

from scheduler.kube.api import BindResult
from scheduler.service.podbook import Stage
from tests.builders import MakePod
from tests.integration import test_pod_lifecycle as lifecycle_tests
from tests.integration.test_pod_lifecycle import Backend
from tests.lifecycle import Apiserver, node, until

# The stores of test_pod_lifecycle.py: memory, and the session's real redis-server.
redis_url = lifecycle_tests.redis_url
backend = lifecycle_tests.backend


class Sending(Apiserver):
    """The apiserver, with the Bindings sent counted (each before it waits for its gate)."""

    def __init__(self) -> None:
        super().__init__()
        self.sent = 0

    async def bind(
        self, namespace: str, name: str, uid: str, node: str, annotations: dict[str, str]
    ) -> BindResult:
        self.sent += 1
        return await super().bind(namespace, name, uid, node, annotations)


async def test_a_binding_of_an_earlier_decision_tells_the_new_one_nothing(
    backend: Backend,
) -> None:
    """a is pending on a node of one GPU; etcd is backed up. a is decided onto n/0; its
    Binding commits, but its answer is slow to come (an apiserver answering 500 after etcd
    committed it), and the bound watch shows a bound. etcd is restored from the backup (a
    pending again) and both watches re-list: a new era; a is decided again onto n/0, its new
    Binding slow too. Then the first Binding is answered 403, and its retry, of the era
    before, is not sent: that attempt failed. It says nothing of the new Binding: a keeps n/0
    while that is sent, and b, pending meanwhile, gets no GPU. Told to the new decision, the
    refusal forgot n/0, b was decided onto it, and both a and b were bound there."""
    api = Sending()
    r = backend.replica(api, "a")
    api.version = 1000
    await r.elect([node(1)])
    a = r.pending(MakePod().Name("a").Req(1).Obj())
    backup = dict(api.pods), api.version
    first = api.gates[a.key] = asyncio.Event()  # the first Binding waits for its answer
    await r.step()
    assert r.s.book.stage(a.key) is Stage.BINDING and r.held(a.key) == ("n", [0])
    await until(lambda: api.sent == 1)
    api.land(a.key, "n", "0")  # it committed
    r.bound_seen(a.key)
    assert r.s.book.stage(a.key) is Stage.BOUND
    api.pods, api.version = dict(backup[0]), backup[1]  # the restore: a pending again
    r.s.intake.replace_pending([api.pods[a.key]], api.version)
    r.s.intake.replace_bound(*r.bound_list())
    assert r.s.book.era == 1 and r.s.book.stage(a.key) is Stage.PENDING
    second = api.gates[a.key] = asyncio.Event()  # the new decision's Binding waits too
    await r.step()
    assert r.s.book.stage(a.key) is Stage.BINDING and r.held(a.key) == ("n", [0])
    await until(lambda: api.sent == 2)
    api.refuse[a.key] = 403
    first.set()  # the first Binding refused; its retry is of the era before: not sent
    await until(lambda: r.s.binder.in_flight == 1)
    del api.refuse[a.key]
    assert r.s.book.stage(a.key) is Stage.BINDING, r.s.book.stage(a.key)
    assert r.held(a.key) == ("n", [0])
    b = r.pending(MakePod().Name("b").Req(1).Obj())
    assert await r.step() == b.key
    assert r.s.book.stage(b.key) is Stage.PENDING and not api.pods[b.key].node_name
    second.set()
    await r.settle()
    assert api.pods[a.key].node_name == "n"
    assert [key for key, _, _ in api.binds] == [a.key], api.binds
    assert await r.owners() == {0: "default/a"}
