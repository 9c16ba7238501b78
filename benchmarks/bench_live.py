"""bench-live: topo-scheduler beside kube-scheduler on one local control plane (a benchmark).

One plane (kube-apiserver, etcd, KWOK) with 500 KWOK nodes of 8 GPUs (DGX-1 V100 inventory,
``nvidia.com/gpu`` allocatable, 64 cpu). The contenders, alternated over ``--rounds`` rounds so
that the machine's load hits them alike:

- kube-scheduler v1.37 (the binary tools/k8s builds) with its own profile, client qps/burst 5000,
  as its scheduler_perf runs it (scheduler/testing/kubescheduler.py);
- a decide-nothing binder (benchmarks/binder.py: 64 Bindings in flight, round robin): what this
  apiserver can take;
- topo-scheduler run with Redis, and with the embedded store (deploy/'s configuration, its own
  scheduler name).

Each round of each contender: a backlog of 2,000 single-GPU pods (with cpu and memory requests,
so the whole filter chain runs) is created in a namespace of its own before the contender starts;
throughput = pods / (last bind - first bind), the binds seen by a watch (benchmarks/liveplane.py).
That watch resumes from its last resourceVersion when the apiserver closes it: on a young
cluster the apiserver's watch cache gives a new watcher room for only 10 events, and closes it
when a burst of binds outruns it (round 1 used to end its count there, e.g. at 340 of 2,000).
Each round also prints the contender process's CPU time per pod bound (utime + stime from
/proc/<pid>/stat, sampled every 20 ms, between the first and the last bind, divided by the
pods): the figure the shared machine's load does not swing as it swings the rates. The backlog
is deleted, then the contender stopped and its peak RSS read (VmHWM). After the rounds:

- gangs: 250 gangs of 4 x 2 GPUs for topo-scheduler (Redis), in pods/s, beside kube-scheduler's
  1-GPU pods/s;
- stream: pods created at 50/s for 10 s under each scheduler, create-to-bind p50/p99;
- claims (DRA, issue 29): as many DRA-only KWOK nodes again (``dra-*``: no ``nvidia.com/gpu``
  allocatable; their 8 GPUs, DGX-1 V100, are devices of the ResourceSlice the test DRA driver,
  scheduler/testing/dradriver.py, publishes; its DeviceClasses without extendedResourceName, so
  the plain pods never land there), then kube-scheduler and topo-scheduler (Redis) alternated
  over the rounds, each with a backlog of as many pods, each pod using one ResourceClaim for 1
  GPU of class gpu.nvidia.com with cpu and memory requests. Variant ``claims``: the claims
  pre-created, one per pod; variant ``templates``: one ResourceClaimTemplate, the resourceclaim
  controller's claims all made before the contender starts (the controller is not what is
  measured). Its own table: pods/s and the ratio to kube-scheduler of the same variant. A
  round's claims are deleted after its pods, and the next round waits until they are gone
  (their devices free again);
- spread and anti-affinity (issue 32 item 3): the shapes kube-scheduler's scheduler_perf suite
  times (its pod-with-topology-spreading and pod-with-pod-anti-affinity templates), on the same
  1-GPU pods: ``spread``, a backlog of ``--pods`` pods labelled ``color: blue`` with one
  DoNotSchedule constraint of maxSkew 1 over ``kubernetes.io/hostname`` selecting them (as
  many pods per node, give or take one); ``anti-affinity``, one pod per node (``--nodes``,
  at most ``--pods``) labelled ``color: green`` with a required pod anti-affinity term over
  the hostname selecting them. kube-scheduler, the binder (which binds them round robin,
  the apiserver's ceiling, rules or not) and topo-scheduler (Redis) alternated over the
  rounds; a table of its own, pods/s and the ratios to kube-scheduler and the binder;
- failover: two topo-scheduler replicas (lease 15 s), the leader SIGKILLed, until the standby
  binds a new pod.

Prints one table of medians over the rounds (the claims part one of its own); never fails on
the figures. ``--quick`` (also
bench-smoke's) runs one round on 50 nodes with backlogs of 100 pods and streams of 3 s: about a
few minutes, every part once; it fails (exit status 1) when a backlog (the claims part's too),
the gangs or the failover's pod are not all bound: the run is broken, whatever its figures.
``--only`` runs some contenders' backlog rounds (words of their labels: ``kube,Redis``) and,
with ``claims`` or ``templates``, that variant of the claims part, with ``spread`` or
``anti-affinity`` that workload (for the contenders named, or all three), nothing else; with
only the claims' words, no plain node is created; with only workload words, no plain round runs.
Usage: python -m benchmarks.bench_live [--quick] [--rounds 2] [--nodes 500] [--pods 2000]
       [--kube-verbosity 2] [--logs DIR] [--profile DIR]
       [--only WORDS]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import ssl
import statistics
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks.liveplane import (
    DGX1_INVENTORY,
    KUBE_NAME,
    LIMITS,
    REPO,
    TOPO_NAME,
    RssSampler,
    Watch,
    bulk_create,
    clear_claims,
    clear_namespace,
    dgx1_dra_inventory,
    kill,
    pct,
    start_topo,
    tear_down,
    throughput,
    topo_config,
    wait_nodes_ready,
)
from benchmarks.profiler import Profiler, summary
from scheduler.testing.controlplane import ADMIN_TOKEN, ControlPlane, build_binaries, pod_manifest
from scheduler.testing.dradriver import GPU_CLASS, V100, NvidiaDraDriver, gpu_slices, to_json
from scheduler.testing.kubescheduler import KubeScheduler
from scheduler.testing.redisserver import RedisServer

BINDER_NAME = "binder-bench"
DRA_LABEL = "bench-dra=true"  # the DRA-only nodes of the claims part
# One GPU of the driver's full-GPU class: every pod's one claim, pre-created or from a template.
CLAIM_SPEC = {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": GPU_CLASS}}]}}
HOSTNAME = "kubernetes.io/hostname"
# The constrained workloads (issue 32 item 3), words of ``--only``.
WORKLOADS = ("spread", "anti-affinity")


class Contender:
    def __init__(
        self,
        label: str,
        scheduler_name: str,
        start: Callable[[str, int], int],
        stop: Callable[[], None],
    ) -> None:
        self.label = label
        self.name = scheduler_name
        self._start, self._stop = start, stop
        self.rates: list[float] = []
        self.rss: list[float] = []
        self.cpu_ms: list[float] = []  # CPU ms per pod bound, each backlog round
        self._sampler: RssSampler | None = None
        self.profile_to: Path | None = None  # --profile: py-spy's stacks of each start go here
        self._profiler: Profiler | None = None
        self._starts = 0

    def start(self, namespace: str, expected: int, watch: Watch | None = None) -> None:
        """Start the contender; with ``--profile``, py-spy samples it from the first bind
        ``watch`` sees (from the start without one): its imports, start-up and LISTs, a third
        of the samples of a whole run, are not the bind window the rates measure."""
        pid = self._start(namespace, expected)
        self._sampler = RssSampler(pid)
        if self.profile_to is not None:
            self._starts += 1
            slug = self.label.replace(" ", "").replace(",", "-")
            out = self.profile_to / f"{slug}-{self._starts}-{namespace}.txt"
            deadline = time.monotonic() + 60
            while watch is not None and not watch.bound and time.monotonic() < deadline:
                time.sleep(0.005)
            self._profiler = Profiler(pid, out)

    def cpu_per_pod(self, times: list[float]) -> float:
        """The last start's CPU ms per pod between the first and the last of ``times``."""
        return float("nan") if self._sampler is None else self._sampler.cpu_per_pod(times)

    def stop(self, clear: Callable[[], None] = lambda: None) -> None:
        """Stop sampling, run ``clear`` (the round's backlog deleted), then stop the contender.

        The backlog is deleted while the contender still runs, as a scheduler that keeps
        running sees its pods go: topo-scheduler's store then forgets them. Deleted after it
        stopped, they stayed in its Redis as records of pods no watch had shown, which the next
        topo-scheduler round inherited and read back one GET each (a new leader's check that
        they are not a previous leader's last Bindings), 2,000 reads beside its first
        Bindings: 18% of its samples in an anti-affinity round after a spread round. No real
        cluster deletes every pod of a scheduler each time it stops; kube-scheduler and the
        binder keep nothing, so the order changes nothing for them."""
        if self._sampler is not None:
            self.rss.append(self._sampler.stop())
        if self._profiler is not None:
            self._profiler.stop()
            for line in summary(self._profiler.out):
                print(f"    {line}", flush=True)
            self._profiler = None
        clear()
        self._stop()


def create_pods(
    plane: ControlPlane, namespace: str, scheduler: str, names: list[str], **kw: object
) -> None:
    limits = dict(LIMITS)
    gpus = str(kw.pop("gpus", 1))
    limits["nvidia.com/gpu"] = gpus

    def one(name: str) -> None:
        plane.create_pod(name, namespace=namespace, scheduler=scheduler, limits=limits, **kw)  # type: ignore[arg-type]

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(one, names))


def stream(
    plane: ControlPlane, namespace: str, scheduler: str, rate: int, seconds: int
) -> list[float]:
    """Pods created at ``rate``/s for ``seconds``; each one's create-to-bind latency.

    One thread creates them in order on one keep-alive connection, and the watch runs in
    another: a pool of threads each opening a TLS connection per pod kept this process busy
    enough (Python threads share one interpreter lock) to delay the watch's own timestamps by
    tens of milliseconds, a tail that was the benchmark's and not the scheduler's."""
    plane.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    watch = Watch(plane, namespace)
    created: dict[str, float] = {}
    names = [f"s-{i:05d}" for i in range(rate * seconds)]
    limits = {**LIMITS, "nvidia.com/gpu": "1"}
    url = urllib.parse.urlsplit(plane.server)
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    conn = http.client.HTTPSConnection(url.netloc, context=context, timeout=30)
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"}
    start = time.monotonic()
    try:
        for pos, name in enumerate(names):
            delay = start + pos / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            body = json.dumps(pod_manifest(name, namespace, scheduler, {"main": limits}))
            created[name] = time.monotonic()  # the create's own time counts too
            conn.request("POST", f"/api/v1/namespaces/{namespace}/pods", body, headers)
            with conn.getresponse() as resp:
                resp.read()
                if resp.status != 201:
                    raise RuntimeError(f"creating pod {name}: HTTP {resp.status}")
    finally:
        conn.close()
    watch.wait(names, 60)
    latencies = [watch.bound[n] - created[n] for n in names if n in watch.bound]
    clear_namespace(plane, namespace)
    return latencies


def add_dra_nodes(plane: ControlPlane, count: int) -> None:
    """``count`` DRA-only KWOK nodes (no ``nvidia.com/gpu`` allocatable) of 8 V100 GPUs in the
    DGX-1 topology, each GPU a device of the ResourceSlice the test DRA driver would publish for
    it; the driver's DeviceClasses installed without ``extendedResourceName``, so the plain
    backlog's ``nvidia.com/gpu`` pods can never land on these nodes."""
    NvidiaDraDriver(plane).install_classes(extended_resource=False)
    key, _, value = DRA_LABEL.partition("=")

    def one(i: int) -> None:
        name = f"dra-{i:04d}"
        inventory = dgx1_dra_inventory(name)
        node = plane.create_gpu_node(name, inventory, resource=None, labels={key: value})
        for piece in gpu_slices(name, inventory, V100, node_uid=node["metadata"]["uid"]):
            plane.apply(to_json(piece))

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(one, range(count)))
    wait_nodes_ready(plane, count, label=DRA_LABEL)


def create_claim_pods(
    plane: ControlPlane, namespace: str, scheduler: str, names: list[str], template: bool
) -> None:
    """The claims part's backlog in ``namespace``: pods with cpu/memory requests, each using one
    ResourceClaim for 1 GPU (``CLAIM_SPEC``): pre-created, one per pod, or with ``template``
    made from one ResourceClaimTemplate by the resourceclaim controller. Either way every claim
    exists and is named in its pod's status before this returns, so the contender started next
    is measured and not the controller."""
    plane.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    ref: dict[str, str] = {"name": "gpu"}
    if template:
        meta = {"name": "gpu", "namespace": namespace}
        kind = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate"}
        plane.apply({**kind, "metadata": meta, "spec": {"spec": CLAIM_SPEC}})
    else:
        claims = [
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": f"c-{name}", "namespace": namespace},
                "spec": CLAIM_SPEC,
            }
            for name in names
        ]
        bulk_create(plane, claims)

    def pod(name: str) -> dict[str, object]:
        manifest = pod_manifest(name, namespace, scheduler, {"main": dict(LIMITS)})
        source = (
            {"resourceClaimTemplateName": "gpu"} if template else {"resourceClaimName": f"c-{name}"}
        )
        manifest["spec"]["resourceClaims"] = [{**ref, **source}]
        manifest["spec"]["containers"][0]["resources"]["claims"] = [ref]
        return manifest

    bulk_create(plane, [pod(n) for n in names])
    if template:
        wait_claims_made(plane, namespace, len(names))


def constrained_pod(name: str, namespace: str, scheduler: str, workload: str) -> dict[str, object]:
    """One pod of a constrained workload: the plain backlog's 1-GPU pod with scheduler_perf's
    constraint (its pod-with-topology-spreading template over hostnames with maxSkew 1, its
    pod-with-pod-anti-affinity template in the pod's own namespace)."""
    manifest = pod_manifest(name, namespace, scheduler, {"main": {**LIMITS, "nvidia.com/gpu": "1"}})
    spec = manifest["spec"]
    if workload == "spread":
        labels = {"color": "blue"}
        spec["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": HOSTNAME,
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": labels},
            }
        ]
    else:
        labels = {"color": "green"}
        term = {"labelSelector": {"matchLabels": labels}, "topologyKey": HOSTNAME}
        spec["affinity"] = {
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
        }
    manifest["metadata"]["labels"] = labels
    return manifest


def wait_claims_made(plane: ControlPlane, namespace: str, count: int, timeout: float = 300) -> None:
    """Until ``count`` pods of the namespace name the claim the resourceclaim controller made
    for them from their template (``status.resourceClaimStatuses``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pods = plane.request("GET", f"/api/v1/namespaces/{namespace}/pods")["items"]
        made = sum(
            1
            for p in pods
            if any(
                s.get("resourceClaimName")
                for s in p.get("status", {}).get("resourceClaimStatuses", [])
            )
        )
        if made >= count:
            return
        time.sleep(1)
    raise RuntimeError(f"{namespace}: the resourceclaim controller made only some claims")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="50 nodes, 100 pods, one round, 3 s streams"
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--kube-verbosity", type=int, default=2, help="kube-scheduler's -v")
    parser.add_argument("--logs", type=Path, help="copy every process's log here at the end")
    parser.add_argument(
        "--profile",
        type=Path,
        help="sample topo-scheduler with py-spy in every run (a backlog round's from its first "
        "bind); stacks and top lines go here",
    )
    parser.add_argument(
        "--only",
        help="comma-separated words of the contenders to run (e.g. kube,Redis); 'claims' runs "
        "the DRA part with pre-created claims, 'templates' its template variant; 'spread' and "
        "'anti-affinity' those workloads; skips the gangs, stream and failover parts",
    )
    args = parser.parse_args()
    stream_s = 10
    if args.quick:
        args.nodes, args.pods, args.rounds, stream_s = 50, 100, 1, 3

    plane = ControlPlane(build_binaries())
    redis = RedisServer()
    kube: KubeScheduler | None = None
    procs: list[subprocess.Popen[bytes]] = []
    problems: list[str] = []  # what breaks the run whatever its figures (fails --quick)
    try:
        plane.start()
        redis.start()
        plane.grant_scheduler_role()
        words = args.only.split(",") if args.only else []
        variants = [v for v in ("claims", "templates") if not words or v in words]
        workloads = [w for w in WORKLOADS if not words or w in words]
        plain = [w for w in words if w not in variants and w not in workloads]
        if plain or workloads:
            with ThreadPoolExecutor(16) as pool:
                list(
                    pool.map(
                        lambda i: plane.create_gpu_node(f"node-{i:04d}", DGX1_INVENTORY),
                        range(args.nodes),
                    )
                )
            wait_nodes_ready(plane, args.nodes)
        config = topo_config(plane.dir)
        current: dict[str, subprocess.Popen[bytes] | None] = {"p": None}

        def start_kube(namespace: str, expected: int) -> int:
            nonlocal kube
            kube = KubeScheduler(plane, name=KUBE_NAME, verbosity=args.kube_verbosity).start()
            assert kube.process is not None
            return kube.process.proc.pid

        def stop_kube() -> None:
            if kube is not None:
                kube.stop()

        def start_binder(namespace: str, expected: int) -> int:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "benchmarks.binder",
                    plane.server,
                    ADMIN_TOKEN,
                    namespace,
                    BINDER_NAME,
                    str(expected),
                ],
                cwd=REPO,
                start_new_session=True,
            )
            current["p"] = proc
            return proc.pid

        def start_topo_with(redis_url: str | None) -> Callable[[str, int], int]:
            def start(namespace: str, expected: int) -> int:
                proc = start_topo(plane, config, redis_url, plane.dir / "topo.log")
                current["p"] = proc
                procs.append(proc)
                return proc.pid

            return start

        def stop_current() -> None:
            kill(current["p"])
            current["p"] = None

        contenders = [
            Contender("kube-scheduler v1.37", KUBE_NAME, start_kube, stop_kube),
            Contender("decide-nothing binder", BINDER_NAME, start_binder, stop_current),
            Contender("topo-scheduler, Redis", TOPO_NAME, start_topo_with(redis.url), stop_current),
            Contender("topo-scheduler, embedded", TOPO_NAME, start_topo_with(None), stop_current),
        ]
        # The claims part's: the same two schedulers, their own records, per variant.
        dra = [
            contender
            for v in variants
            for contender in (
                Contender(f"kube-scheduler v1.37, {v}", KUBE_NAME, start_kube, stop_kube),
                Contender(
                    f"topo-scheduler, Redis, {v}",
                    TOPO_NAME,
                    start_topo_with(redis.url),
                    stop_current,
                ),
            )
        ]
        # The constrained workloads': kube-scheduler, the binder, topo-scheduler with Redis.
        constrained = [
            Contender(f"{label}, {w}", name, start, stop)
            for w in workloads
            for label, name, start, stop in (
                ("kube-scheduler v1.37", KUBE_NAME, start_kube, stop_kube),
                ("decide-nothing binder", BINDER_NAME, start_binder, stop_current),
                ("topo-scheduler, Redis", TOPO_NAME, start_topo_with(redis.url), stop_current),
            )
            if not plain or any(word in label for word in plain)
        ]
        if words:
            contenders = [c for c in contenders if any(w in c.label for w in plain)]
        if args.profile:
            args.profile.mkdir(parents=True, exist_ok=True)
            for c in contenders + dra + constrained:
                if c.name == TOPO_NAME:
                    c.profile_to = args.profile
        names = [f"p-{i:05d}" for i in range(args.pods)]

        def backlog(rnd: int, c: Contender, ns: str, claims: str = "", workload: str = "") -> None:
            """One round of one contender: its backlog created, started, every bind awaited
            (180 s at most), the backlog deleted while it still runs, stopped; ``claims``
            names the claims part's variant (its pods use ResourceClaims), ``workload`` a
            constrained workload."""
            pods = names
            if claims:
                create_claim_pods(plane, ns, c.name, names, template=claims == "templates")
            elif workload:
                # Anti-affinity over hostnames: one pod per node at most.
                pods = names if workload == "spread" else names[: args.nodes]
                plane.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
                bulk_create(plane, [constrained_pod(n, ns, c.name, workload) for n in pods])
            else:
                plane.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
                create_pods(plane, ns, c.name, names)
            watch = Watch(plane, ns)
            c.start(ns, len(pods), watch)
            times = watch.wait(pods, 180)
            if len(times) < len(pods):
                problems.append(f"round {rnd + 1} {c.label} bound {len(times)}/{len(pods)}")
            c.stop(lambda: clear_claims(plane, ns) if claims else clear_namespace(plane, ns))
            c.rates.append(throughput(times))
            c.cpu_ms.append(c.cpu_per_pod(times))
            print(
                f"  round {rnd + 1} {c.label}: {len(times)} bound, {c.rates[-1]:.0f} pods/s, "
                f"{c.cpu_ms[-1]:.2f} CPU ms/pod",
                flush=True,
            )

        def claims_part() -> None:
            """The DRA part: its nodes added to the plane, its rounds, its table."""
            if not dra:
                return
            add_dra_nodes(plane, args.nodes)
            for rnd in range(args.rounds):
                order = dra if rnd % 2 == 0 else dra[::-1]
                for c in order:
                    variant = c.label.rpartition(", ")[2]
                    backlog(rnd, c, f"{variant}-r{rnd}-{c.name}", variant)
            print()
            print(
                f"bench-live claims: {args.nodes} DRA-only KWOK nodes x 8 GPUs (ResourceSlices of "
                f"the test DRA driver), backlog of {args.pods} pods each with one ResourceClaim "
                f"for 1 GPU (cpu/memory requests), median of {args.rounds} alternated round(s)"
            )
            print(f"{'contender':<34} {'pods/s':>7} {'x kube':>7} {'peak RSS':>9}")
            for kube_c, topo_c in zip(dra[::2], dra[1::2], strict=True):
                kube_rate = statistics.median(kube_c.rates)
                for c in (kube_c, topo_c):
                    rate = statistics.median(c.rates)
                    ratio = rate / kube_rate if kube_rate else float("nan")
                    print(f"{c.label:<34} {rate:>7.0f} {ratio:>7.2f} {max(c.rss):>6.0f} MB")
            print(
                "(claims: one pre-created claim per pod; templates: one ResourceClaimTemplate, "
                "its claims made before the contender starts)"
            )

        def constrained_part() -> None:
            """The spread and anti-affinity workloads: their rounds, their table."""
            if not constrained:
                return
            for rnd in range(args.rounds):
                order = constrained if rnd % 2 == 0 else constrained[::-1]
                for c in order:
                    workload = c.label.rpartition(", ")[2]
                    backlog(rnd, c, f"{workload}-r{rnd}-{c.name}", workload=workload)
            print()
            print(
                f"bench-live constrained: {args.nodes} KWOK nodes x 8 GPUs, 1-GPU pods (cpu/memory "
                f"requests); spread: {args.pods} pods, maxSkew 1 over hostnames; anti-affinity: "
                f"{min(args.pods, args.nodes)} pods, required anti-affinity over hostnames; "
                f"median of {args.rounds} alternated round(s)"
            )
            print(
                f"{'contender':<38} {'pods/s':>7} {'x kube':>7} {'x binder':>8} "
                f"{'CPU ms/pod':>10} {'peak RSS':>9}"
            )
            for w in workloads:
                mine = {c.name: c for c in constrained if c.label.endswith(f", {w}")}
                rates = {name: statistics.median(c.rates) for name, c in mine.items()}
                for name, c in mine.items():
                    kube_x = rates[name] / rates[KUBE_NAME] if rates.get(KUBE_NAME) else None
                    binder_x = rates[name] / rates[BINDER_NAME] if rates.get(BINDER_NAME) else None
                    print(
                        f"{c.label:<38} {rates[name]:>7.0f} "
                        f"{'-' if kube_x is None else f'{kube_x:.2f}':>7} "
                        f"{'-' if binder_x is None else f'{binder_x:.2f}':>8} "
                        f"{statistics.median(c.cpu_ms):>10.2f} {max(c.rss):>6.0f} MB"
                    )

        if not words or plain:
            for rnd in range(args.rounds):
                order = contenders if rnd % 2 == 0 else contenders[::-1]
                for c in order:
                    backlog(rnd, c, f"r{rnd}-{c.name}-{contenders.index(c)}")
        if args.only:
            for c in contenders:
                print(
                    f"{c.label:<28} {statistics.median(c.rates):>7.0f} pods/s "
                    f"{statistics.median(c.cpu_ms):>6.2f} CPU ms/pod"
                )
            constrained_part()
            claims_part()
            if args.quick and problems:
                raise SystemExit("bench-live --quick: broken: " + "; ".join(problems))
            return

        # Gangs: 250 x 4 pods x 2 GPUs under topo-scheduler with Redis.
        gangs = max(1, args.pods // 8)
        ns = "gangs"
        plane.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        gang_names = [f"g{g:04d}-{m}" for g in range(gangs) for m in range(4)]

        def gang_pod(name: str) -> None:
            job = name.split("-")[0]
            labels = {"gpu-topology": job, "gpu-topology-replica": "4"}
            plane.create_pod(
                name,
                namespace=ns,
                scheduler=TOPO_NAME,
                labels=labels,
                limits={**LIMITS, "nvidia.com/gpu": "2"},
            )

        with ThreadPoolExecutor(16) as pool:
            list(pool.map(gang_pod, gang_names))
        watch = Watch(plane, ns)
        topo = contenders[2]
        topo.start(ns, len(gang_names))
        gang_times = watch.wait(gang_names, 180)
        gang_rate = throughput(gang_times)
        if len(gang_times) < len(gang_names):
            problems.append(f"gangs bound {len(gang_times)}/{len(gang_names)}")
        topo.stop(lambda: clear_namespace(plane, ns))

        # Streams at 50 pods/s under each scheduler.
        latencies: dict[str, list[float]] = {}
        for c in (contenders[0], contenders[2]):
            c.start("stream", 0)
            time.sleep(3)  # synced and leading
            latencies[c.label] = stream(plane, f"stream-{c.name}", c.name, 50, stream_s)
            c.stop()
            c.rss.pop()  # the stream's peak is not the backlog's

        kube_rate = statistics.median(contenders[0].rates)
        binder_rate = statistics.median(contenders[1].rates)
        print()
        print(
            f"bench-live: {args.nodes} KWOK nodes x 8 GPUs, backlog of {args.pods} single-GPU pods "
            f"(cpu/memory requests), median of {args.rounds} alternated round(s)"
        )
        print(
            f"{'contender':<28} {'pods/s':>7} {'x kube':>7} {'x binder':>8} "
            f"{'p50 ms':>7} {'p99 ms':>7} {'CPU ms/pod':>10} {'peak RSS':>9}"
        )
        for c in contenders:
            rate = statistics.median(c.rates)
            lat = latencies.get(c.label, [])
            p50 = f"{pct(lat, 0.5) * 1000:.0f}" if lat else "-"
            p99 = f"{pct(lat, 0.99) * 1000:.0f}" if lat else "-"
            print(
                f"{c.label:<28} {rate:>7.0f} {rate / kube_rate:>7.2f} {rate / binder_rate:>8.2f} "
                f"{p50:>7} {p99:>7} {statistics.median(c.cpu_ms):>10.2f} {max(c.rss):>6.0f} MB"
            )
        print(
            f"{'topo-scheduler gangs 4x2':<28} {gang_rate:>7.0f} {gang_rate / kube_rate:>7.2f} "
            f"{gang_rate / binder_rate:>8.2f} {'-':>7} {'-':>7} {'-':>10} {'':>9}"
        )
        print(f"(p50/p99: create-to-bind for pods created at 50/s for {stream_s} s)")
        constrained_part()
        claims_part()

        # Failover with the default lease.
        leader = start_topo(plane, config, redis.url, plane.dir / "leader.log")
        procs.append(leader)
        time.sleep(3)
        standby = start_topo(plane, config, redis.url, plane.dir / "standby.log")
        procs.append(standby)
        time.sleep(3)
        os.killpg(leader.pid, signal.SIGKILL)
        killed = time.monotonic()
        leader.wait()
        plane.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "failover"}})
        create_pods(plane, "failover", TOPO_NAME, ["after-failover"])
        while time.monotonic() - killed < 60:
            pod = plane.request("GET", "/api/v1/namespaces/failover/pods/after-failover")
            if pod["spec"].get("nodeName"):
                break
            time.sleep(0.1)
        else:
            problems.append("failover: the new pod was not bound 60 s after the kill")
        print(
            "failover (lease 15 s, renew 5 s): leader killed -> standby bound a new pod in "
            f"{time.monotonic() - killed:.1f} s"
        )
        if args.quick and problems:
            raise SystemExit("bench-live --quick: broken: " + "; ".join(problems))
    finally:
        tear_down(plane, procs, kube, redis, args.logs)


if __name__ == "__main__":
    main()
