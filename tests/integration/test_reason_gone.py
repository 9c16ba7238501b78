"""A PodScheduled=False write that finds no pod wrote nothing (sim seed 11867).

The pod was deleted while its reason was being written (the write answered 404, which the
client does not raise), and an etcd restore from a backup taken before the delete brought the
pod of that UID back, pending. The book held the reason as written, so no later decision wrote
it again: the pod stayed pending without a reason for good. A write that finds no pod now leaves
the reason unwritten, and the pod's next decision writes it. Stepped by hand on BOTH stores (the
``backend`` fixture of test_pod_lifecycle.py) against the fake apiserver of tests/lifecycle.py.
"""

from __future__ import annotations

import asyncio

from tests.builders import MakePod
from tests.integration import test_pod_lifecycle as lifecycle_tests
from tests.integration.test_pod_lifecycle import Backend
from tests.lifecycle import node

redis_url = lifecycle_tests.redis_url
backend = lifecycle_tests.backend

KEY = "default/huge"


async def test_a_reason_written_to_a_deleted_pod_is_written_when_the_pod_comes_back(
    backend: Backend,
) -> None:
    r = backend.live()
    await r.elect([node(1)])
    pod = r.pending(MakePod().Name("huge").Req(4).Obj())
    slow = r.api.status_gates[KEY] = asyncio.Event()
    await r.step()  # unschedulable: its report waits
    await asyncio.sleep(0)
    deleted = r.api.pods.pop(KEY)  # deleted; the pending watch has not told it yet
    slow.set()
    await r.settle()
    assert KEY not in r.api.unschedulable  # 404: nothing written
    # an etcd restore brings the pod back (the same UID, as the backup had it)
    r.api.pods[KEY] = deleted
    r.s.intake.pending_event("MODIFIED", deleted)
    assert deleted.uid == pod.uid
    r.s.intake.node_event("MODIFIED", node(2))  # something changed: the pod is tried again
    r.clock.now += 10.0
    await r.renew()
    assert await r.step() == KEY
    await r.settle()
    assert r.api.unschedulable[KEY].startswith("0/1 nodes are available")
