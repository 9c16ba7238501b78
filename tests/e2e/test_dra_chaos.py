"""Chaos with ResourceClaims (issue 29's "Done when"): the leader of two replicas is killed with
SIGKILL between a claim's status write and its pod's Binding, and the next leader loses no device
and gives none twice.

The window is hit deterministically: a ValidatingAdmissionPolicy refuses the Bindings of the
"held" pods (tests/e2e/dra.py ``bindings_refused``), so the leader writes their claims (the
finalizer, then the allocation and ``reservedFor``: PreBind) and then retries a Binding that
cannot land; with many bind attempts configured it is still retrying when it is killed, the
moment its log shows every held pod refused once. The kill leaves each held pod's claim allocated
and reserved for a pod that is not bound (checked). The policy goes with the kill; the standby
takes over after the lease (3 s) and must bind the held pods on the devices their claims hold,
or release them, while the other pods compete for what is left.

More GPUs are asked than the nodes have, so a device held for nobody shows as one pod too few
bound; the auditor (scheduler/testing/audit.py, its DRA rules) says whether a device was ever in
two claims of running pods, and whether any claim of ours is left allocated for nobody.
"""

from __future__ import annotations

from typing import Any

from scheduler.state.redis_store import RedisStore
from scheduler.testing.audit import View, collect, until_settled
from scheduler.testing.redisserver import RedisServer

from .dra import DraScene, bindings_refused
from .dra_shapes import gpus
from .live import Scenario, SchedulerProcess, begin_history, tail_logs
from .test_chaos import SETTLE_S, unexpected_book_events, wait_leader

GPUS_PER_NODE = 8


async def wait_refused(replicas: list[SchedulerProcess], pods: set[str]) -> SchedulerProcess:
    """The replica whose log shows a refused Binding of every one of ``pods`` (keys): their
    claims were written, their Bindings are being retried. The logs are read as they grow."""
    seen: dict[SchedulerProcess, set[str]] = {s: set() for s in replicas}

    def enough(s: SchedulerProcess, lines: list[dict[str, Any]]) -> bool:
        seen[s].update(str(line.get("pod")) for line in lines)
        return pods <= seen[s]

    found = await tail_logs(replicas, b'"bind refused"', enough, 60, 0.01)
    if found is not None:
        return found
    logs = "\n".join(s.tail() for s in replicas)
    raise AssertionError(f"not every held pod was refused: {seen}\n{logs}")


def claim_of(scene: DraScene, pod: dict[str, Any]) -> dict[str, Any]:
    (name,) = scene.pod_claims(pod)
    return scene.get_claim(name)


def devices(claim: dict[str, Any]) -> set[tuple[str, str]]:
    allocation = claim.get("status", {}).get("allocation") or {}
    return {(r["pool"], r["device"]) for r in allocation.get("devices", {}).get("results", [])}


def reason(pod: dict[str, Any]) -> str:
    for c in pod.get("status", {}).get("conditions") or []:
        if c["type"] == "PodScheduled" and c["status"] == "False":
            return str(c.get("message", ""))
    return ""


async def test_leader_sigkilled_between_a_claim_write_and_its_binding(
    scenario: Scenario, scene: DraScene, redis_server: RedisServer
) -> None:
    """2 DRA-only nodes of 8 H100 (16 GPUs); 4 "held" pods and 8 others, each with a template
    claim of 2 GPUs (24 asked), all there when two replicas start on one Redis. The held pods'
    Bindings are refused until the leader, having written their claims, is killed."""
    nodes = [scene.node(f"a{n}") for n in range(2)]
    template = scene.template("pair", gpus(2))
    # Refused Bindings are retried 30 times (not 3): the leader is still retrying at the kill.
    config = scenario.config.read_text()
    assert "tuning: {" in config
    scenario.config.write_text(config.replace("tuning: {", "tuning: {bindAttempts: 30, "))
    held = [scene.full(f"held-{i}") for i in range(4)]
    store = RedisStore.from_url(redis_server.url, prefix=f"t-{scenario.id}")
    try:
        with bindings_refused(scene.plane, scene.full("held")):
            # The held pods' names sort first: the replicas' first LIST queues them first.
            for i in range(4):
                scene.pod(f"held-{i}", scenario.name, templates={"gpus": template})
            for i in range(8):
                scene.pod(f"more-{i}", scenario.name, templates={"gpus": template})
            await begin_history(redis_server.url, scenario)
            replicas = [scenario.start_scheduler(redis_server.url) for _ in range(2)]
            leader = await wait_refused(replicas, {f"default/{n}" for n in held})
            leader.kill9()
            # The window: each held pod's claim allocated and reserved for it, the pod unbound.
            at_kill = {}
            for name in held:
                pod = scene.get_pod(name)
                claim = claim_of(scene, pod)
                assert not pod["spec"].get("nodeName"), name
                reserved = [r["uid"] for r in claim["status"].get("reservedFor", [])]
                assert devices(claim) and reserved == [pod["metadata"]["uid"]], claim["status"]
                at_kill[name] = devices(claim)
        standby = next(s for s in replicas if s is not leader)
        await wait_leader([standby])
        port = await standby.http_port()

        async def read() -> View:
            return await collect(
                scene.plane, scenario.name, {"test": scene.id}, store, {"standby": port}
            )

        settled = await until_settled(read, timeout_s=SETTLE_S)
        for v in settled.seen:
            print(f"  seen while settling: {v}")
        view = await read()
    finally:
        await store.close()
    logs = "\n".join(f"--- {s.log.name}\n{s.tail()}" for s in replicas)
    assert settled.clean, f"{settled.report()}\n{logs}"
    assert not unexpected_book_events([standby]), unexpected_book_events([standby])
    ours = [p for p in view.pods if p["spec"].get("schedulerName") == scenario.name]
    assert (len(view.nodes), len(ours)) == (2, 12)
    # No device lost: every GPU of the two nodes is in the claim of a bound pod (8 pods of 2),
    # and the 4 left wait because no node has 2 free GPUs.
    bound = [p for p in ours if p["spec"].get("nodeName")]
    held_by_bound: set[tuple[str, str]] = set()
    for pod in bound:
        held_by_bound |= devices(claim_of(scene, pod))
    assert len(held_by_bound) == 2 * GPUS_PER_NODE and {n for n, _ in held_by_bound} == set(
        nodes
    ), sorted(held_by_bound)
    assert len(bound) == 8, logs
    for pod in ours:
        if not pod["spec"].get("nodeName"):
            assert "cannot allocate all claims" in reason(pod), pod["status"]
    kept = [n for n in held if devices(claim_of(scene, scene.get_pod(n))) == at_kill[n]]
    print(
        f"held pods whose claims kept the dead leader's devices: {len(kept)} of {len(held)}; "
        f"settled in {settled.seconds:.1f} s, {settled.rounds} audits"
    )
