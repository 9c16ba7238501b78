"""A pod bound without our annotations is held with a guessed mask; guessed while every GPU of
its node was held (here: an etcd restore brings it back beside the pod our Binding bound on
its GPU), the mask is short. Once the other pod's GPUs go back, the guess must take them: the
kubelet admitted the pod, so it uses one. Stepped by hand on BOTH stores (the ``backend``
fixture of test_pod_lifecycle.py): before the fix the Redis run placed the next pod on that
GPU (found while writing sim seed 25470's stepped test).
"""

from __future__ import annotations

from tests.builders import MakePod
from tests.integration import test_pod_lifecycle as lifecycle_tests
from tests.integration.test_pod_lifecycle import Backend, run
from tests.lifecycle import Apiserver, node

redis_url = lifecycle_tests.redis_url
backend = lifecycle_tests.backend


async def test_a_restored_pod_guessed_short_takes_the_gpu_given_back(backend: Backend) -> None:
    api = Apiserver()
    r = backend.replica(api, "a")
    api.version = 1000
    await r.elect([node(1)])
    # a: bound on n without a devices annotation (its GPU is guessed).
    r.s.intake.bound_event("ADDED", api.create(MakePod().Name("a").Req(1).Bound("n").Obj()))
    b = r.pending(MakePod().Name("b").Req(1).Obj())
    backup = dict(api.pods), api.version
    await run(r)
    assert r.held("default/a") == ("n", [0]) and not api.pods[b.key].node_name
    r.clock.now += 10.0  # b's backoff
    await r.renew()
    r.s.intake.bound_event("DELETED", api.delete("default/a"))
    await run(r)
    assert api.pods[b.key].node_name == "n" and r.held(b.key) == ("n", [0])
    # The restore: a bound again (guessed short beside b, assumed on GPU 0), b pending.
    api.pods, api.version = dict(backup[0]), backup[1]
    r.s.intake.replace_pending([api.pods[b.key]], api.version)
    r.s.intake.replace_bound(*r.bound_list())
    await run(r)
    # b's GPU went back when it was read pending: a's guess took it, and b waits again.
    assert r.held("default/a") == ("n", [0]) and r.held(b.key) is None
    assert not api.pods[b.key].node_name
