"""A PodScheduled=False condition is part of its pod: an etcd restore from a backup taken before
it was written undoes it. Stepped by hand on BOTH stores (the ``backend`` fixture of
test_pod_lifecycle.py) against the fake apiserver of tests/lifecycle.py.

Before the fix the book held the reason as written across the restore, so the pod's next
decisions (the same reason) wrote nothing: it stayed pending without a reason. The simulation
found it as soon as its world restored the conditions with the pods (sim seeds 1, 22, 27, 30 of
``make sim``). A new era (PodBook.new_era) forgets what was written.
"""

from __future__ import annotations

from tests.builders import MakePod
from tests.integration import test_pod_lifecycle as lifecycle_tests
from tests.integration.test_pod_lifecycle import Backend, run
from tests.lifecycle import Apiserver, node

redis_url = lifecycle_tests.redis_url
backend = lifecycle_tests.backend

KEY = "default/huge"


async def test_a_reason_a_restore_undid_is_written_again(backend: Backend) -> None:
    api = Apiserver()
    r = backend.replica(api, "a")
    api.version = 1000
    await r.elect([node(1)])
    r.pending(MakePod().Name("huge").Req(4).Obj())
    backup = dict(api.pods), api.version, dict(api.unschedulable)
    # Another scheduler's pod bound after the backup: the book has seen a version the restore
    # takes back (else nothing tells that the versions went back).
    r.s.intake.bound_event("ADDED", api.create(MakePod().Name("o").Bound("n").Obj()))
    await run(r)
    assert api.unschedulable[KEY].startswith("0/1 nodes are available")
    # The restore: the pod as the backup had it, without its condition; both watches re-list.
    api.pods, api.version, api.unschedulable = dict(backup[0]), backup[1], dict(backup[2])
    r.s.intake.replace_pending([api.pods[KEY]], api.version)
    r.s.intake.replace_bound(*r.bound_list())
    assert r.s.book.era == 1 and KEY not in api.unschedulable
    r.clock.now += 10.0  # its backoff
    await r.renew()
    r.s.intake.node_event("MODIFIED", node(1))  # something changed: it is tried again
    await run(r)
    assert api.unschedulable[KEY].startswith("0/1 nodes are available")
