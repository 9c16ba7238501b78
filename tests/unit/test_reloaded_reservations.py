"""A reservation the previous leader made carries the pod's GPUs per resource name through the
store, so the next leader, reloading it for a pod still pending, charges it to the node's
allocatable as well as its GPUs."""

from __future__ import annotations

import msgspec

from scheduler.core.cycle import Unit, decide
from scheduler.core.model.decisions import Placed, Unschedulable
from scheduler.core.settings import CoreSettings
from scheduler.core.snapshot.holdings import holding_of
from scheduler.service.leader import Leadership, LeaseTiming
from scheduler.service.metrics import Metrics
from scheduler.service.scheduler import Scheduler
from scheduler.state.base import Claim
from scheduler.state.memory import MemoryStore
from tests.builders import MakeNode, MakePod
from tests.topologies import PCIE8

TTL = 15_000


def clock() -> float:
    return 0.0


def scheduler(store: MemoryStore, holder: str) -> Scheduler:
    # The reconcile and the claims never call the apiserver: no cluster client is needed.
    return Scheduler(
        CoreSettings(),
        "topo-scheduler",
        None,  # type: ignore[arg-type]
        store,
        Leadership(store, holder, LeaseTiming(), clock),
        Metrics(),
        clock,
    )


async def test_a_reloaded_reservation_is_charged_to_the_allocatable() -> None:
    store = MemoryStore(clock)
    node = MakeNode().Name("n").Links(PCIE8).Allocatable({"nvidia.com/gpu": 4}).Obj()
    pod = MakePod().Name("p").Req(3).Obj()

    # The old leader decides p and reserves it, then dies before binding.
    old = scheduler(store, "old")
    old.state.set_node(node)
    decision = decide(old.state, Unit(None, (pod,)))
    assert isinstance(decision, Placed)
    claim = old.sync.claim_of(holding_of(decision.placements[0]))
    assert claim is not None and claim.resources == (("nvidia.com/gpu", 3),)
    first = await store.acquire("old", TTL)
    assert first is not None
    await store.reserve("old", first, [claim])
    await store.release_lease("old", first)

    # The new leader sees p still pending and reloads its reservation.
    new = scheduler(store, "new")
    new.state.set_node(node)
    new.intake.pending_event("ADDED", pod)
    new.intake.replace_bound([])
    epoch = await store.acquire("new", TTL)
    assert epoch is not None
    new.leadership.epoch = epoch
    await new.on_elected(epoch)  # inherits, reconciles, reloads
    assert new.state.holdings[pod.key].resources == (("nvidia.com/gpu", 3),)
    assert new.state.nodes["n"].used[new.state.resource_index["nvidia.com/gpu"]] == 3
    other = MakePod().Name("q").Req(2).Obj()
    decision = decide(new.state, Unit(None, (other,)))
    assert isinstance(decision, Unschedulable)
    assert decision.reason == (
        "0/1 nodes are available: 1 has too little allocatable nvidia.com/gpu."
    )


def test_a_claim_written_before_resources_existed_still_decodes() -> None:
    old = b'{"uid":"u","pod":"default/p","node":"n","devices":[0,1],"shares":[],"gang":""}'
    claim = msgspec.json.decode(old, type=Claim)
    assert claim.devices == (0, 1)
    assert claim.resources == ()
    again = msgspec.json.decode(
        msgspec.json.encode(msgspec.structs.replace(claim, resources=(("nvidia.com/gpu", 2),))),
        type=Claim,
    )
    assert again.resources == (("nvidia.com/gpu", 2),)
