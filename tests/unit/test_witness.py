"""The epoch witness (scheduler/service/witness.py) stepped by hand against an in-memory
ConfigMap with resourceVersions: what an election concludes from the store's history and the
witness, and when a renewal stops counting (tests/e2e/test_witness.py runs it on the apiserver).
"""

from __future__ import annotations

import asyncio

import pytest

from scheduler.kube.watch import HttpError
from scheduler.service.leader import Leadership, LeaseTiming
from scheduler.service.metrics import Metrics
from scheduler.service.witness import NEVER, Witness, WitnessError
from scheduler.state.base import History
from scheduler.state.memory import MemoryStore
from tests.clock import ManualClock
from tests.lifecycle import TTL_MS, Apiserver, ConfigMaps, Replica, node


async def test_an_election_tells_a_new_installation_from_a_lost_history() -> None:
    api = ConfigMaps()
    a = Witness(api, "topo", namespace="ns")
    # Epoch 1, no history, no record: nobody ever led. Recorded before the first decision.
    assert await a.elected("a", 1, History(False, "")) == (True, False)
    assert await a.read() == "a|1"
    # The store flushed (epoch 1 again), but the witness remembers a: wait.
    assert await a.elected("b", 1, History(False, "")) == (False, False)
    # An ordinary takeover on the same Redis: the history ends with the recorded leader.
    assert await a.elected("c", 2, History(True, "b|1")) == (False, True)
    # A store that kept its history, but a newer leader is recorded than the one it ends with
    # (an old master after a failover): wait.
    assert await a.elected("d", 3, History(True, "a|1")) == (False, False)
    # Other schedulers' keys live beside this one.
    other = Witness(api, "other", namespace="ns")
    assert await other.read() == NEVER
    assert await other.elected("x", 1, History(False, "")) == (True, False)
    assert await a.read() == "d|3"


async def test_a_renewal_stops_counting_once_a_newer_leader_is_recorded() -> None:
    api = ConfigMaps()
    old, new = Witness(api, "topo", "ns"), Witness(api, "topo", "ns")
    await old.elected("a", 5, History(True, ""))
    assert not await old.superseded("a", 5)
    await new.elected("b", 5, History(False, ""))  # the same number, after a lost increment
    assert await old.superseded("a", 5)
    assert not await new.superseded("b", 5)
    # Before a term's record (its election under way), nothing is superseded yet.
    assert not await old.superseded("a", 6)
    # A witness that cannot be read: the renewal does not count, nor does an election.
    api.failure = OSError("connection refused")
    with pytest.raises(WitnessError):
        await new.superseded("b", 5)
    with pytest.raises(WitnessError):
        await new.elected("b", 6, History(True, "b|5"))  # the election fails: no lead


async def test_a_403_fails_the_election_and_the_renewal_and_never_turns_the_witness_off() -> None:
    """Issue 30, 4: a 403 (an authorization webhook timing out, RBAC re-applied by GitOps, or a
    Role never granted) is a witness that cannot confirm the epoch, as any other error: no
    election, no renewal counts, and once the witness answers again it fences as before."""
    api = ConfigMaps()
    metrics = Metrics()
    a = Witness(api, "topo", "ns", errors=metrics.witness_errors)
    api.failure = HttpError(403, "forbidden")
    with pytest.raises(WitnessError):
        await a.elected("a", 1, History(False, ""))  # no shortcut, no lead: fail closed
    api.failure = None
    assert await a.elected("a", 1, History(False, "")) == (True, False)
    api.failure = HttpError(403, "forbidden")
    with pytest.raises(WitnessError):
        await a.superseded("a", 1)  # the renewal does not count
    api.failure = None
    assert not await a.superseded("a", 1)
    await Witness(api, "topo", "ns").elected("b", 1, History(False, ""))
    assert await a.superseded("a", 1)  # the 403 left nothing behind: b's record deposes a
    sample = metrics.registry.get_sample_value
    assert sample("scheduler_witness_errors_total", {"call": "read", "error": "403"}) == 2
    # A namespace that does not exist (a 404 on the create): no lead either.
    api.failure = HttpError(404, "namespaces not found")
    with pytest.raises(WitnessError):
        await a.elected("a", 2, History(True, "b|1"))


async def test_a_configmap_deleted_between_read_and_write_is_a_conflict_to_retry() -> None:
    class DeletedOnce(ConfigMaps):
        armed = False

        async def write_config_map(
            self, namespace: str, name: str, data: dict[str, str], resource_version: str | None
        ) -> bool:
            if self.armed:  # deleted after the read
                self.armed = False
                del self.maps[name]
            return await super().write_config_map(namespace, name, data, resource_version)

    api = DeletedOnce()
    await Witness(api, "topo", "ns").elected("a", 1, History(False, ""))
    api.armed = True
    w = Witness(api, "topo", "ns")
    # The patch of the ConfigMap read finds it gone (KubeApi: 404 on the patch, False): read
    # again, create it, recorded. Not chained: the record it replaced is none, and a record
    # that vanished proves nothing about who led last (sim seed 3127).
    assert await w.elected("b", 2, History(True, "a|1")) == (False, False)
    assert await w.read() == "b|2" and w.recorded == "b|2"


async def test_a_leader_whose_record_is_gone_cannot_confirm_its_renewals() -> None:
    """The ConfigMap deleted under a leader: its renewals stop counting (its lease runs out) until
    an election records it again."""
    api = ConfigMaps()
    a = Witness(api, "topo", "ns")
    await a.elected("a", 3, History(True, ""))
    api.maps.clear()
    with pytest.raises(WitnessError):
        await a.superseded("a", 3)
    # Not chained, though the store's history ends with a: a record that vanished proves
    # nothing about who led meanwhile (another side of a partition may have; sim seed 3127).
    assert await a.elected("a", 4, History(True, "a|3")) == (False, False)
    assert not await a.superseded("a", 4)


async def test_a_leader_whose_renewal_is_superseded_stops_leading() -> None:
    clock = ManualClock(0.0)
    store = MemoryStore(clock)
    api = ConfigMaps()
    witness = Witness(api, "topo", "ns")
    rival = Witness(api, "topo", "ns")
    lost = asyncio.Event()

    async def sleep(seconds: float) -> None:
        clock.now += seconds
        await asyncio.sleep(0)

    leadership = Leadership(
        store, "a", LeaseTiming(15, 5, 2), clock, sleep, superseded=witness.superseded
    )

    async def on_elected(epoch: int) -> None:
        await witness.elected("a", epoch, History(epoch > 1, ""))

    async def on_lost() -> None:
        lost.set()

    task = asyncio.create_task(leadership.run(on_elected, on_lost))
    try:
        while leadership.epoch is None or not witness.recorded:
            await asyncio.sleep(0)
        for _ in range(10):  # renewals count: the witness holds a's record
            await asyncio.sleep(0)
        assert leadership.leading and not lost.is_set()
        # A newer leader elected on another Redis (a failover that left a's master taking
        # writes) records itself: a's next renewal, which its own Redis accepts, does not count.
        await rival.elected("b", 9, History(False, ""))
        await asyncio.wait_for(lost.wait(), 5)
    finally:
        await leadership.release()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_deposed_leader_that_takes_the_lease_again_on_the_old_master_waits() -> None:
    """A partition: leader a keeps an old master (m1) that still takes its writes, while the
    Sentinels promoted a replica (m2, which lost a's last writes) and b is elected there. b
    waits one lease (its store's history is cut); a's renewals on m1 stop counting once b is
    recorded; and when a takes its lease on m1 again, its election finds b recorded, not the
    leader m1's history ends with, so a waits out b's lease too."""
    clock = ManualClock(0.0)
    api, maps = Apiserver(), ConfigMaps()
    m1, m2 = MemoryStore(clock), MemoryStore(clock)
    wa, wb = Witness(maps, "topo", "ns"), Witness(maps, "topo", "ns")
    a = Replica(api, m1, clock, "a", wait_for_unknown_leader=True, witness=wa)
    b = Replica(api, m2, clock, "b", wait_for_unknown_leader=True, witness=wb)
    assert await a.elect([node(2)]) == 1
    assert not a.s.may_decide()  # no leader recorded: one lease plus bindCommitSeconds first
    assert await b.elect([node(2)]) == 1  # the promoted replica: a's lease and epoch lost
    assert not b.s.may_decide()  # its history is cut: one lease first
    assert await m1.renew("a", 1, TTL_MS)  # the old master still takes a's renewal...
    assert await wa.superseded("a", 1)  # ...which does not count: b is recorded
    assert await a.elect([node(2)]) == 1  # a takes its lease on m1 again
    assert not a.s.may_decide()  # m1's history ends with a, the witness names b: wait
    assert await wb.superseded("b", 1)  # and b, deposed in turn, stops (no overlap)
