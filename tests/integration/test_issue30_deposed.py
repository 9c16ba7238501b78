"""Issue 30, soak seed 691: a deposed leader's unanswered Binding is let go once it cannot land.

A leader whose Binding got no answer holds the pod's GPUs and sends the same Binding again until
an answer says (binder.py, BIND_UNKNOWN). Deposed (its lease lapsed: a partition, a store
failover), it may send nothing more, and before the fix it read the pod back for ever: pending
said nothing, so the pod stayed BINDING in its book and its GPUs held in its snapshot, long
after that Binding could no longer commit (an apiserver gives a write up after its request
timeout, run.tuning.bindCommitSeconds). The standby's snapshot drifted from the apiserver (the
simulation's per-node sums, seed 691), and elected again it sent that old term's Binding onto
GPUs a later leader had given away. Stepped by hand on BOTH stores (the ``backend`` fixture of
test_pod_lifecycle.py), against the fake apiserver of tests/lifecycle.py.
"""

from __future__ import annotations

import asyncio
import contextlib

from scheduler.config.tuning import Tuning
from scheduler.service.podbook import Stage
from tests.builders import MakePod
from tests.integration import test_pod_lifecycle as lifecycle_tests
from tests.integration.test_issue30_binding import gpus_given_twice, lease_lapses
from tests.integration.test_pod_lifecycle import Backend
from tests.lifecycle import Apiserver, node, past_commit, until

# The stores of test_pod_lifecycle.py: memory, and the session's real redis-server.
redis_url = lifecycle_tests.redis_url
backend = lifecycle_tests.backend


async def test_issue30_a_deposed_leaders_unanswered_binding_is_let_go_once_it_cannot_land(
    backend: Backend,
) -> None:
    api = Apiserver()
    a = backend.replica(api, "a", bind_timeout=0.02)
    await a.elect([node(1)])
    api.stalled["default/p"] = None  # etcd stalls: p's Binding gets no answer
    a.pending(MakePod().Name("p").Req(1).Obj())
    assert await a.step() == "default/p"
    await until(lambda: api.stalled["default/p"] is not None)  # sent
    api.stalled["default/p"] = None  # etcd gives that write up: it never commits
    await lease_lapses(backend)  # a is deposed (its store out of reach, then failed over)
    assert not a.leadership.leading
    await asyncio.sleep(0.05)  # a reads p back, pending: its Binding may still land
    assert a.s.book.stage("default/p") is Stage.BINDING and a.held("default/p") == ("n", [0])

    # Past the apiserver's request timeout since it was sent, p read pending was not bound by it
    # and never will be: a lets p's GPU go, as the apiserver shows it.
    backend.clock.now += Tuning().bind_commit_seconds
    with contextlib.suppress(AssertionError):
        await until(lambda: a.s.book.stage("default/p") is not Stage.BINDING)
    assert a.s.book.stage("default/p") is Stage.PENDING
    assert a.held("default/p") is None

    # A later leader gave GPU 0 to c; elected again, a sends nothing of its first term.
    del api.stalled["default/p"]
    c = api.create(MakePod().Name("c").Req(1).Obj())
    c = api.land(c.key, "n", "0")
    a.bound_seen(c.key)
    await lease_lapses(backend)
    await a.elect([node(1)], bound=[c])
    await a.settle()
    assert gpus_given_twice(api) == [] and not api.pods["default/p"].node_name
    # Its store record of p (its release was not written while deposed) is held as any
    # previous leader's reservation until no Binding of that leader can land; then p is
    # decided afresh, and finds no room.
    await past_commit(a)
    assert await a.step() == "default/p"
    await a.settle()
    assert gpus_given_twice(api) == [] and not api.pods["default/p"].node_name
    assert a.held("default/c") == ("n", [0]) and a.held("default/p") is None
