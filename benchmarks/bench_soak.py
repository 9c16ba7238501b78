"""bench-soak: 50,000 pods created and deleted through a leader and a standby (issue 12, item 9).

A benchmark, not a test: it prints figures and never fails on them. Everything runs in this
process: a local redis-server (no persistence, a unix socket), two live ``Scheduler``s sharing one
``RedisStore``, each with its own ``Leadership`` on the real clock (lease 15 s) and its own loop
(``Scheduler.run``), and a fake apiserver (tests/lifecycle.py's, whose first Binding wins) that
delivers the watch events of every change to both replicas on the next turn of the event loop:
a pod created is a pending ADDED, a Binding that lands is the pending DELETED and the bound
ADDED, a pod deleted is its pending or bound DELETED. The leader is elected on a fresh store
without the wait for an unknown previous leader (nobody led before), then the standby starts
competing for the lease.

The pods come in waves (``--wave`` at a time, on ``--nodes`` nodes of 8 GPUs, so a wave fits)
and go through every path: single pods of 1 or 2 GPUs and 2-pod gangs bound and deleted, a
Binding refused on every attempt (the pod backs off and retries until deleted), a Binding whose
answer is lost (the retry gets 409 and reads the pod back), a pod that fits nowhere (parked),
a pod deleted before its turn, and one deleted while its Binding is in flight. Each wave waits
until the leader has bound what it can and both replicas have seen it, then deletes every pod
and waits until both replicas have let them go. Bind retries wait 10 ms instead of 0.5 s (the
refused pods would otherwise hold the binder's slots for seconds each).

Other schedulers' pods churn beside ours (issue 20, drift 1): every wave, ``--jobs`` pods of
``default-scheduler`` Jobs (cpu and memory, no GPU) appear bound across the nodes, finish (the
bound watch sees them leave as Succeeded) and are deleted; and a DaemonSet-like rollout replaces
its pod on every node (a hostPort) by the next version. The drift auditor's sums
(core/snapshot/nodesums.py: each replica's snapshot, node by node, against the same sums computed
from the fake apiserver's pods) are compared as the soak goes.

Printed: RSS (the peak, ``ru_maxrss``, and the current one, from /proc/self/statm) and the
snapshots' drift (nodes whose sums differ, and by how many pods) as the soak goes; the size of
every per-pod structure of both replicas (``Scheduler.sizes()``) before the first pod, at the
peak (the largest value after any wave had settled) and after the last pod left; then whatever
is not back to its size before, and what the store still holds. A drift left at the end is the
one thing that fails the run (exit status 1): the snapshot must equal the cluster.

``--quick`` (bench-smoke) soaks 2,000 pods (five waves): seconds, every path and the same table.

Usage: python -m benchmarks.bench_soak [--quick] [--pods 50000] [--wave 400] [--nodes 64]
       [--jobs 32]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import logging
import os
import resource
import time
from collections.abc import Callable
from typing import Any

import msgspec
import structlog

from scheduler.config.tuning import Tuning
from scheduler.core.model.objects import ContainerInput, HostPort, NodeInput, PodInput
from scheduler.core.settings import CoreSettings
from scheduler.core.snapshot import nodesums
from scheduler.service.leader import Leadership, LeaseTiming
from scheduler.service.metrics import Metrics
from scheduler.service.podbook import Stage
from scheduler.service.scheduler import Scheduler
from scheduler.state.redis_store import RedisStore
from scheduler.testing.redisserver import RedisServer
from tests.lifecycle import Apiserver

GPUS = 8
SETTINGS = CoreSettings(gpu_resources={"nvidia.com/gpu": "nvidia"})
# Failed Bindings are retried after 10 ms, not the default 0.5 s per attempt (as before).
TUNING = Tuning(bind_retry_seconds=0.01)
SETTLE_TIMEOUT_S = 60.0
Sizes = dict[str, int]


class WatchedApiserver(Apiserver):
    """The fake apiserver of the tests, whose changes reach the replicas as watch events."""

    def __init__(self) -> None:
        super().__init__()
        self.replicas: list[Scheduler] = []
        self.errors: list[str] = []
        self.landed = 0  # Bindings that landed (``binds`` is emptied after every wave)
        self._loop = asyncio.get_running_loop()

    def _send(self, call: Callable[..., None], *args: Any) -> None:
        def deliver() -> None:
            try:
                call(*args)
            except Exception as exc:  # the bench reports them at the end
                self.errors.append(f"{call.__name__}: {exc!r}")

        self._loop.call_soon(deliver)

    def create(self, pod: PodInput) -> PodInput:
        pod = super().create(pod)
        for s in self.replicas:
            self._send(s.intake.pending_event, "ADDED", pod)
        return pod

    def bound(self, key: str) -> None:
        self.landed += 1
        pod = self.pods[key]
        for s in self.replicas:
            self._send(s.intake.pending_event, "DELETED", pod)
            self._send(s.intake.bound_event, "ADDED", pod)

    def run(self, pod: PodInput) -> None:
        """Another scheduler's pod appears bound (and running)."""
        self.pods[pod.key] = pod
        for s in self.replicas:
            self._send(s.intake.bound_event, "ADDED", pod)

    def finish(self, key: str) -> None:
        """It succeeds: it stays in the apiserver, and leaves the bound pods' watch (whose field
        selector excludes finished pods: a DELETED event)."""
        pod = self.pods[key] = msgspec.structs.replace(self.pods[key], phase="Succeeded")
        for s in self.replicas:
            self._send(s.intake.bound_event, "DELETED", pod)

    def delete(self, key: str) -> PodInput:
        pod = super().delete(key)
        self.refuse.pop(key, None)  # the fake keeps nothing of a pod that left either
        self.lose_answer.discard(key)
        for s in self.replicas:
            if pod.finished:
                continue  # the bound watch saw it leave when it finished
            if pod.node_name:
                self._send(s.intake.bound_event, "DELETED", pod)
            else:
                gone = msgspec.structs.replace(pod, deleting=True)
                self._send(s.intake.pending_event, "DELETED", gone)
        return pod


def make_node(i: int) -> NodeInput:
    name = f"node-{i:04d}"
    inventory = {
        "vendor": "nvidia",
        "devices": [{"index": d, "uuid": f"{name}-GPU-{d}"} for d in range(GPUS)],
        "links": [["X" if a == b else "NV2" for b in range(GPUS)] for a in range(GPUS)],
    }
    return NodeInput(
        name,
        annotations={"topo-scheduler.io/gpus": json.dumps(inventory)},
        allocatable={"nvidia.com/gpu": str(GPUS), "pods": "110"},
    )


# What happens to pod i, by i % 20 (gated: i % 40 == 6, fewer than the binder's 16 slots a wave).
GANG, REFUSED, LOST, NOWHERE, EARLY, GATED = (0, 1), 2, 3, 4, 5, 6


def make_pod(i: int, api: WatchedApiserver) -> PodInput:
    kind = i % 20
    labels = {}
    gpus = 2 if kind in (7, 8) else 1
    if kind in GANG:
        labels = {"gpu-topology": f"job-{i // 20}", "gpu-topology-replica": "2"}
    elif kind == NOWHERE:
        gpus = 2 * GPUS
    pod = PodInput(
        "soak",
        f"p{i}",
        uid=f"uid-{i}",
        scheduler_name="topo-scheduler",
        phase="Pending",
        labels=labels,
        containers=(ContainerInput("c", limits={"nvidia.com/gpu": str(gpus)}),),
    )
    if kind == REFUSED:
        api.refuse[pod.key] = 500
    elif kind == LOST:
        api.lose_answer.add(pod.key)
    elif i % 40 == GATED:
        api.gates[pod.key] = asyncio.Event()
    return pod


def other_pod(name: str, node: str, port: int = 0) -> PodInput:
    """A running pod of default-scheduler without GPUs (a Job's, a DaemonSet's)."""
    ports = (HostPort(port),) if port else ()
    container = ContainerInput("c", requests={"cpu": "250m", "memory": "64Mi"}, host_ports=ports)
    return PodInput(
        "others",
        name,
        uid=f"uid-{name}",
        node_name=node,
        phase="Running",
        containers=(container,),
    )


def should_bind(i: int) -> bool:
    return i % 20 not in (REFUSED, NOWHERE, EARLY) and i % 40 != GATED


class Replica:
    def __init__(self, holder: str, store: RedisStore, api: WatchedApiserver) -> None:
        self.holder = holder
        self.leadership = Leadership(store, holder, LeaseTiming(), time.monotonic)
        self.s = Scheduler(
            SETTINGS,
            "topo-scheduler",
            api,
            store,
            self.leadership,
            Metrics(),
            time.monotonic,
            wait_for_unknown_leader=False,  # a fresh store and nobody led before
            tuning=TUNING,
        )
        self.tasks: list[asyncio.Task[None]] = []

    def start(self, nodes: list[NodeInput]) -> None:
        self.s.intake.replace_nodes(nodes)
        self.s.intake.replace_bound([])
        self.s.intake.replace_pending([])
        self.tasks = [
            asyncio.create_task(self.s.run(), name=f"{self.holder}-loop"),
            asyncio.create_task(
                self.leadership.run(self.s.on_elected, self.s.on_lost),
                name=f"{self.holder}-lease",
            ),
        ]

    async def stop(self) -> None:
        await self.leadership.release()
        for task in self.tasks:
            task.cancel()
        for task in self.tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.s.drain()

    def flat_sizes(self) -> Sizes:
        return {
            f"{part}.{k}": n for part, sizes in self.s.sizes().items() for k, n in sizes.items()
        }


async def wait_for(what: str, condition: Callable[[], bool], describe: Callable[[], str]) -> None:
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not reached in {SETTLE_TIMEOUT_S:.0f} s: {describe()}")
        await asyncio.sleep(0.005)


def rss_mb() -> tuple[float, float]:
    """(peak, current) resident set size in MB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return peak, pages * os.sysconf("SC_PAGE_SIZE") / 2**20


class Soak:
    def __init__(
        self,
        api: WatchedApiserver,
        leader: Replica,
        standby: Replica,
        nodes: list[NodeInput],
        jobs: int,
    ) -> None:
        self.api = api
        self.leader = leader
        self.replicas = (leader, standby)
        self.peak = {r.holder: r.flat_sizes() for r in self.replicas}
        self.rss_peak = rss_mb()
        self.nodes = [n.name for n in nodes]
        self.jobs = jobs
        self.waves = 0
        self.others = 0  # other schedulers' pods created

    def churn_others(self) -> list[str]:
        """This wave's Job pods appear, and the DaemonSet rolls out its next version."""
        api, wave = self.api, self.waves
        jobs = []
        for j in range(self.jobs):
            pod = other_pod(f"job-{wave}-{j}", self.nodes[(wave + j) % len(self.nodes)])
            api.run(pod)
            jobs.append(pod.key)
        for node in self.nodes:
            if wave:
                api.delete(f"others/ds-{node}-v{wave - 1}")
            api.run(other_pod(f"ds-{node}-v{wave}", node, port=9100))
        self.others += len(jobs) + len(self.nodes)
        return jobs

    def drift(self) -> dict[str, tuple[int, int]]:
        """Per replica: the nodes whose snapshot sums differ from the apiserver's pods, and the
        pods by which their counts differ in all."""
        truth = nodesums.listed(self.api.pods.values(), SETTINGS, self.nodes)
        out = {}
        for r in self.replicas:
            held = nodesums.held(r.s.state, self.nodes)
            off = [n for n in self.nodes if nodesums.differences(held[n], truth[n])]
            pods = sum(abs(held[n].pods - truth[n].pods) for n in off)
            out[r.holder] = (len(off), pods)
        return out

    async def wave(self, indices: range) -> None:
        """Create the pods, wait until what can be bound is (and seen by both replicas), then
        delete them all and wait until both replicas have let them go."""
        api, leader = self.api, self.leader
        jobs = self.churn_others()
        pods = {i: api.create(make_pod(i, api)) for i in indices}
        for i in indices:
            if i % 20 == EARLY:
                api.delete(pods[i].key)  # deleted before its turn (or during it)
        gated = [pods[i].key for i in indices if pods[i].key in api.gates]
        await wait_for(
            "gated binds in flight",
            lambda: all(leader.s.book.stage(k) is Stage.BINDING for k in gated),
            lambda: str([leader.s.explain(k) for k in gated]),
        )
        for key in gated:  # deleted while its Binding is in flight
            api.delete(key)
            api.gates.pop(key).set()
        expected = [pods[i].key for i in indices if should_bind(i)]
        await wait_for("wave bound", lambda: self.bound(expected), self.describe)
        self.rss_peak = max(self.rss_peak, rss_mb(), key=lambda rss: rss[1])
        for r in self.replicas:
            for name, size in r.flat_sizes().items():
                self.peak[r.holder][name] = max(self.peak[r.holder][name], size)
        for key in jobs:
            api.finish(key)
        for pod in pods.values():
            if pod.key in api.pods:
                api.delete(pod.key)
        for key in jobs:
            api.delete(key)  # the Job's TTL
        await wait_for("wave gone", self.gone, self.describe)
        # The fake keeps what it was told for tests to read: forgotten here, or the soak would
        # measure the fake's memory growing (2 MB per 10,000 pods: docs/benchmarks.md, bench-soak).
        api.forget()
        self.waves += 1

    def bound(self, keys: list[str]) -> bool:
        if self.leader.s.binder.in_flight:
            return False
        return all(
            (pod := self.api.pods.get(k)) is not None
            and pod.node_name != ""
            and all(r.s.book.stage(k) is Stage.BOUND for r in self.replicas)
            for k in keys
        )

    def gone(self) -> bool:
        """Our pods gone (other schedulers' running pods keep their entries), and every
        replica's snapshot equal to the apiserver's pods."""
        if any(r.s.tasks.running or r.s.binder.in_flight for r in self.replicas):
            return False
        entries = (e for r in self.replicas for e in r.s.book.entries.values())
        if any(e.stage is not Stage.OTHER for e in entries):
            return False
        return not any(nodes for nodes, _ in self.drift().values())

    def describe(self) -> str:
        sizes = "; ".join(f"{r.holder}: {r.s.sizes()}" for r in self.replicas)
        return f"{sizes}; drift (nodes, pods off): {self.drift()}"


async def run(args: argparse.Namespace) -> bool:
    """The soak; True when a snapshot drifted from the cluster by the end."""
    server = RedisServer().start()
    store = RedisStore.from_url(server.url, prefix="soak")
    api = WatchedApiserver()
    leader, standby = Replica("leader", store, api), Replica("standby", store, api)
    replicas = (leader, standby)
    api.replicas = [r.s for r in replicas]
    nodes = [make_node(i) for i in range(args.nodes)]
    try:
        leader.start(nodes)
        await wait_for("election", leader.s.may_decide, lambda: "no leader")
        standby.start(nodes)
        await asyncio.sleep(0.1)
        gc.collect()
        rss_before = rss_mb()
        before = {r.holder: r.flat_sizes() for r in replicas}
        soak = Soak(api, leader, standby, nodes, args.jobs)
        started = time.perf_counter()
        for created in range(0, args.pods, args.wave):
            await soak.wave(range(created, min(args.pods, created + args.wave)))
            done = min(args.pods, created + args.wave)
            if done % (args.wave * 25) == 0 or done == args.pods:
                drift = ", ".join(
                    f"{h} {nodes} nodes / {pods} pods" for h, (nodes, pods) in soak.drift().items()
                )
                print(
                    f"  {done:,} pods created and deleted, {api.landed:,} binds, "
                    f"{soak.others:,} other schedulers' pods, {time.perf_counter() - started:.0f} "
                    f"s, RSS {rss_mb()[1]:.0f} MB, drift: {drift}",
                    flush=True,
                )
        seconds = time.perf_counter() - started
        for node in soak.nodes:  # the DaemonSet goes too: every replica is back to empty
            api.delete(f"others/ds-{node}-v{soak.waves - 1}")
        await wait_for("the other schedulers' pods gone", soak.gone, soak.describe)
        await asyncio.sleep(0.1)
        gc.collect()
        rss_after = rss_mb()
        after = {r.holder: r.flat_sizes() for r in replicas}
        records, gangs = await store.records(), await store.gangs()
        owners = sum([len(await store.owners(n.name)) for n in nodes])

        print(
            f"soak: {args.pods:,} pods in waves of {args.wave} on {args.nodes} nodes of {GPUS} "
            f"GPUs, one leader and one standby on one redis-server: {api.landed:,} binds "
            f"landed in {seconds:.0f} s ({args.pods / seconds:.0f} pods/s created and deleted)"
        )
        print(
            "RSS (MB, peak ru_maxrss / current statm): "
            f"before {rss_before[0]:.0f}/{rss_before[1]:.0f}, "
            f"at the peak {soak.rss_peak[0]:.0f}/{soak.rss_peak[1]:.0f}, "
            f"after {rss_after[0]:.0f}/{rss_after[1]:.0f}"
        )
        print(
            f"{'structure':<31}{'leader: before peak after':>27}{'standby: before peak after':>29}"
        )
        for name in before["leader"]:
            cells = [
                f"{before[h][name]:>8}{soak.peak[h][name]:>6}{after[h][name]:>7}"
                for h in ("leader", "standby")
            ]
            print(f"{name:<31}{cells[0]:>27}{cells[1]:>29}")
        not_back = [
            f"{h} {name}: {before[h][name]} -> {after[h][name]}"
            for h in before
            for name in before[h]
            if after[h][name] != before[h][name]
        ]
        print("not back to its size before: " + ("; ".join(not_back) or "none"))
        print(
            f"store after: {len(records)} pod records, {owners} GPU owners, {len(gangs)} gang "
            f"records; watch delivery errors: {len(api.errors)}"
            + (f" (first: {api.errors[0]})" if api.errors else "")
        )
        left = soak.drift()
        print(
            "snapshot drift at the end (nodes / pods off): "
            + ", ".join(f"{h} {nodes} / {pods}" for h, (nodes, pods) in left.items())
        )
        return any(nodes for nodes, _ in left.values())
    finally:
        for r in replicas:
            await r.stop()
        await store.close()
        server.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2,000 pods (bench-smoke)")
    parser.add_argument("--pods", type=int, default=50_000)
    parser.add_argument("--wave", type=int, default=400, help="pods created before deleting")
    parser.add_argument("--nodes", type=int, default=64, help="nodes of 8 GPUs")
    parser.add_argument("--jobs", type=int, default=32, help="other schedulers' Job pods per wave")
    args = parser.parse_args()
    if args.quick:
        args.pods = 2000
    # Refused binds and pods that fit nowhere warn by design; errors (an event the pod book's
    # table does not have) still show.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    if asyncio.run(run(args)):
        raise SystemExit("the snapshot drifted from the cluster")


if __name__ == "__main__":
    main()
