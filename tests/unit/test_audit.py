"""The chaos tests' auditor (scheduler/testing/audit.py) on hand-made views: a clean view has no
violation, and each test breaks one thing of it and expects exactly the violation that names
it, so an auditor that says nothing fails here."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from scheduler.core.snapshot import nodesums
from scheduler.core.snapshot.cluster import ClusterState
from scheduler.kube.codec import convert_node, convert_pod
from scheduler.state.base import Claim, GangRecord, Owner, Record
from scheduler.testing.audit import (
    BAD_ASSIGNMENT,
    CLAIM_STRANDED,
    CLAIM_UNRESERVED,
    DEVICE_HELD_TWICE,
    FITS_BUT_PENDING,
    GANG_PARTLY_BOUND,
    GPU_HELD_TWICE,
    SAFETY,
    SNAPSHOT_DRIFT,
    STORE_DISAGREES,
    STORE_MISSING,
    STORE_STALE,
    View,
    Violation,
    audit,
    until_settled,
)

NAME = "topo-test"
SELECTOR = {"test": "t1"}


def node(name: str, gpus: int = 4, **spec: Any) -> dict[str, Any]:
    inventory = {"vendor": "nvidia", "devices": [{"index": i} for i in range(gpus)]}
    return {
        "metadata": {
            "name": name,
            "labels": {"test": "t1"},
            "annotations": {"topo-scheduler.io/gpus": json.dumps(inventory)},
        },
        "spec": dict(spec),
        "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}},
    }


def pod(
    name: str,
    gpus: int,
    on: str = "",
    devices: tuple[int, ...] = (),
    gang: tuple[str, int] | None = None,
    scheduler: str = NAME,
) -> dict[str, Any]:
    labels = {"test": "t1"}
    annotations = {}
    if gang is not None:
        labels |= {"gpu-topology": gang[0], "gpu-topology-replica": str(gang[1])}
    if on:
        annotations["topo-scheduler.io/devices"] = ",".join(str(d) for d in devices)
        annotations["topo-scheduler.io/assignment"] = json.dumps(
            {
                "node": on,
                "devices": [{"index": d, "uuid": f"GPU-{d}"} for d in devices],
                "shares": [],
                "gang": f"default/{gang[0]}" if gang else None,
            }
        )
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"uid-{name}",
            "labels": labels,
            "annotations": annotations,
        },
        "spec": {
            "schedulerName": scheduler,
            "nodeName": on or None,
            "nodeSelector": dict(SELECTOR),
            "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": gpus}}}],
        },
        "status": {"phase": "Running" if on else "Pending"},
    }


def record(p: dict[str, Any], state: str = "bound", gang: str = "", replicas: int = 0) -> Record:
    meta, spec = p["metadata"], p["spec"]
    devices = tuple(int(d) for d in meta["annotations"]["topo-scheduler.io/devices"].split(","))
    claim = Claim(
        meta["uid"], f"default/{meta['name']}", spec["nodeName"], devices, (), gang, replicas
    )
    return Record(claim, state, 3)


def clean() -> View:
    """Two nodes of 4 GPUs: a(2) and a gang g of 2 x 1 on n1, b(2) on n2, c(3) pending (n2 has 2
    free GPUs, n1 has none), and every record in Redis."""
    a = pod("a", 2, "n1", (0, 1))
    g0 = pod("g0", 1, "n1", (2,), gang=("g", 2))
    g1 = pod("g1", 1, "n1", (3,), gang=("g", 2))
    b = pod("b", 2, "n2", (0, 1))
    c = pod("c", 3)
    records = {
        "uid-a": record(a),
        "uid-g0": record(g0, gang="default/g", replicas=2),
        "uid-g1": record(g1, gang="default/g", replicas=2),
        "uid-b": record(b),
    }
    owners = {
        "n1": {
            0: Owner("uid-a", "", 3),
            1: Owner("uid-a", "", 3),
            2: Owner("uid-g0", "default/g", 3),
            3: Owner("uid-g1", "default/g", 3),
        },
        "n2": {0: Owner("uid-b", "", 3), 1: Owner("uid-b", "", 3)},
    }
    gangs = {"default/g": GangRecord("bound", 3, ("uid-g0", "uid-g1"), 2)}
    return View(NAME, [a, g0, g1, b, c], [node("n1"), node("n2")], records, owners, gangs)


def find(view: View, name: str) -> dict[str, Any]:
    return next(dict(p) for p in view.pods if p["metadata"]["name"] == name)


def replace(view: View, name: str, new: dict[str, Any]) -> None:
    view.pods = [new if p["metadata"]["name"] == name else p for p in view.pods]


def broken(change: Callable[[View], None]) -> list[Violation]:
    view = clean()
    change(view)
    return audit(view)


def test_the_clean_view_has_no_violation() -> None:
    assert audit(clean()) == []


# ---- safety -----------------------------------------------------------------------------------


def test_a_gpu_held_by_two_live_pods() -> None:
    def change(view: View) -> None:
        view.pods.append(pod("d", 1, "n2", (1,)))
        view.records = None  # the store is not what this is about

    assert broken(change) == [
        Violation(GPU_HELD_TWICE, "n2#1", "held by default/b and by default/d")
    ]


def test_a_pod_being_deleted_or_finished_holds_nothing_twice() -> None:
    def change(view: View) -> None:
        deleting = pod("d", 1, "n2", (1,))
        deleting["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
        done = pod("e", 1, "n2", (0,))
        done["status"]["phase"] = "Succeeded"
        view.pods += [deleting, done]
        view.records = None

    assert broken(change) == []


def test_a_foreign_pod_on_another_node_is_out_of_scope() -> None:
    def change(view: View) -> None:
        view.pods.append(pod("x", 1, "elsewhere", (0,), scheduler="other"))
        view.pods.append(pod("y", 1, "elsewhere", (0,), scheduler="other"))

    assert broken(change) == []


def test_a_bound_pod_of_ours_without_its_gpus_in_annotations() -> None:
    def no_devices(view: View) -> None:
        a = find(view, "a")
        a["metadata"] = copy.deepcopy(a["metadata"])
        del a["metadata"]["annotations"]["topo-scheduler.io/devices"]
        replace(view, "a", a)

    def other_node(view: View) -> None:
        a = copy.deepcopy(find(view, "a"))
        assignment = json.loads(a["metadata"]["annotations"]["topo-scheduler.io/assignment"])
        assignment["node"] = "n2"
        a["metadata"]["annotations"]["topo-scheduler.io/assignment"] = json.dumps(assignment)
        replace(view, "a", a)

    def too_few(view: View) -> None:
        a = copy.deepcopy(find(view, "a"))
        a["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = 3
        replace(view, "a", a)
        view.records = None

    for change, says in (
        (no_devices, "without annotation topo-scheduler.io/devices"),
        (other_node, "its assignment names node 'n2'"),
        (too_few, "asks for 3 GPUs"),
    ):
        found = [v for v in broken(change) if v.rule == BAD_ASSIGNMENT]
        assert len(found) == 1 and found[0].subject == "default/a", change.__name__
        assert says in found[0].detail, found[0]


def test_safety_rules_are_the_three_that_never_heal() -> None:
    assert frozenset({GPU_HELD_TWICE, BAD_ASSIGNMENT, DEVICE_HELD_TWICE}) == SAFETY


# ---- gangs ------------------------------------------------------------------------------------


def test_a_gang_partly_bound() -> None:
    def change(view: View) -> None:
        g1 = pod("g1", 1, gang=("g", 2))
        replace(view, "g1", g1)
        view.records = None

    assert broken(change) == [
        Violation(
            GANG_PARTLY_BOUND, "default/g", "bound: ['default/g0']; not bound: ['default/g1']"
        )
    ]


def koordinator(p: dict[str, Any], minimum: int, total: int) -> dict[str, Any]:
    """The pod as a member of Koordinator gang "k" (its annotations carry the sizes)."""
    p["metadata"]["annotations"] |= {
        "gang.scheduling.koordinator.sh/name": "k",
        "gang.scheduling.koordinator.sh/min-available": str(minimum),
        "gang.scheduling.koordinator.sh/total-number": str(total),
    }
    return p


def test_an_elastic_gang_may_leave_its_surplus_pending_but_not_its_minimum() -> None:
    def surplus(view: View) -> None:  # 2 of minimum 2 bound, a third (of 3) waits
        view.pods += [
            koordinator(pod("k0", 1, "n2", (2,)), 2, 3),
            koordinator(pod("k1", 1, "n2", (3,)), 2, 3),
            koordinator(pod("k2", 1), 2, 3),
        ]
        view.records = None

    def short(view: View) -> None:  # 1 of minimum 2 bound while 2 wait
        view.pods += [
            koordinator(pod("k0", 1, "n2", (2,)), 2, 3),
            koordinator(pod("k1", 1), 2, 3),
            koordinator(pod("k2", 1), 2, 3),
        ]
        view.records = None

    assert GANG_PARTLY_BOUND not in {v.rule for v in broken(surplus)}
    assert [v for v in broken(short) if v.rule == GANG_PARTLY_BOUND] == [
        Violation(
            GANG_PARTLY_BOUND,
            "default/k",
            "bound: ['default/k0']; not bound: ['default/k1', 'default/k2']",
        )
    ]


# ---- every pod that fits is bound -------------------------------------------------------------


def test_a_pending_pod_that_fits() -> None:
    def change(view: View) -> None:
        view.pods.append(pod("d", 2))

    assert broken(change) == [Violation(FITS_BUT_PENDING, "default/d", "fits on n2")]


@pytest.mark.parametrize(
    "why",
    ["selector", "cordon", "taint", "allocatable", "inventory", "gated", "unhealthy"],
)
def test_a_pending_pod_that_fits_no_node_accepting_it_is_no_violation(why: str) -> None:
    def change(view: View) -> None:
        d = pod("d", 2)
        n2 = view.nodes[1]
        if why == "selector":
            d["spec"]["nodeSelector"] = {"test": "other"}
        elif why == "cordon":
            n2["spec"]["unschedulable"] = True
        elif why == "taint":
            n2["spec"]["taints"] = [{"key": "k", "value": "v", "effect": "NoSchedule"}]
        elif why == "allocatable":
            n2["status"]["allocatable"]["nvidia.com/gpu"] = "3"  # b asks for 2 of 3
        elif why == "inventory":
            n2["metadata"]["annotations"] = {}
        elif why == "gated":
            d["spec"]["schedulingGates"] = [{"name": "wait"}]
        elif why == "unhealthy":
            inventory = {
                "vendor": "nvidia",
                "devices": [{"index": i, "healthy": i < 3} for i in range(4)],
            }
            n2["metadata"]["annotations"]["topo-scheduler.io/gpus"] = json.dumps(inventory)
        view.pods.append(d)

    assert broken(change) == []


def test_a_tolerated_taint_accepts_the_pod() -> None:
    def change(view: View) -> None:
        view.nodes[1]["spec"]["taints"] = [{"key": "k", "value": "v", "effect": "NoSchedule"}]
        d = pod("d", 2)
        d["spec"]["tolerations"] = [{"key": "k", "operator": "Equal", "value": "v"}]
        view.pods.append(d)

    assert broken(change) == [Violation(FITS_BUT_PENDING, "default/d", "fits on n2")]


def test_a_whole_gang_that_fits_across_nodes() -> None:
    def change(view: View) -> None:
        view.nodes.append(node("n3", 2))
        view.pods += [pod("h0", 2, gang=("h", 2)), pod("h1", 2, gang=("h", 2))]

    assert broken(change) == [
        Violation(FITS_BUT_PENDING, "default/h", "2 members fit on ['n2', 'n3']")
    ]


def test_a_gang_that_does_not_fit_or_misses_members_is_no_violation() -> None:
    def too_big(view: View) -> None:
        view.pods += [pod("h0", 2, gang=("h", 2)), pod("h1", 2, gang=("h", 2))]

    def incomplete(view: View) -> None:
        view.nodes.append(node("n3", 2))
        view.pods += [pod("h0", 2, gang=("h", 3)), pod("h1", 2, gang=("h", 3))]

    assert broken(too_big) == []
    assert broken(incomplete) == []


# ---- Redis agrees with the apiserver ----------------------------------------------------------


def test_a_bound_pod_without_its_record() -> None:
    def change(view: View) -> None:
        assert view.records is not None
        del view.records["uid-b"]

    assert broken(change) == [
        Violation(STORE_MISSING, "default/b", "bound to n2 GPUs [0, 1], no record"),
        # and the owners of its GPUs now point at no record
        Violation(STORE_STALE, "n2#0", "owner UID uid-b has no record claiming this GPU"),
        Violation(STORE_STALE, "n2#1", "owner UID uid-b has no record claiming this GPU"),
    ]


def test_a_bound_pod_whose_gpu_has_no_owner_or_another() -> None:
    def change(view: View) -> None:
        del view.owners["n2"][0]
        view.owners["n1"][0] = Owner("uid-b", "", 3)

    assert broken(change) == [
        Violation(STORE_MISSING, "default/a", "GPU 0 on n1: owner UID uid-b"),
        Violation(STORE_MISSING, "default/b", "GPU 0 on n2: no owner"),
        Violation(STORE_STALE, "n1#0", "owner UID uid-b has no record claiming this GPU"),
    ]


def test_a_bound_gang_without_its_record_or_with_another_state() -> None:
    def missing(view: View) -> None:
        view.gangs = {}

    def reserved(view: View) -> None:
        view.gangs["default/g"] = GangRecord("reserved", 3, ("uid-g0", "uid-g1"), 2)

    assert broken(missing) == [Violation(STORE_MISSING, "default/g", "bound gang of 2, no record")]
    assert [v.rule for v in broken(reserved)] == [STORE_DISAGREES]


def test_a_record_for_a_pod_that_does_not_exist_or_finished() -> None:
    # (c is dropped too: b's GPUs are free now, and c would fit in them.)
    def gone(view: View) -> None:
        view.pods = [p for p in view.pods if p["metadata"]["name"] not in ("b", "c")]

    def done(view: View) -> None:
        b = copy.deepcopy(find(view, "b"))
        b["status"]["phase"] = "Failed"
        replace(view, "b", b)
        view.pods = [p for p in view.pods if p["metadata"]["name"] != "c"]

    assert broken(gone) == [
        Violation(STORE_STALE, "default/b", "recorded bound, the pod does not exist")
    ]
    assert broken(done) == [
        Violation(STORE_STALE, "default/b", "recorded bound, the pod has finished")
    ]


def test_a_gang_record_none_of_whose_members_exist() -> None:
    def change(view: View) -> None:
        view.gangs["default/old"] = GangRecord("partial", 2, ("uid-gone",), 2)

    assert broken(change) == [
        Violation(STORE_STALE, "default/old", "gang record partial, none of its members exist")
    ]


def test_a_record_that_contradicts_the_pod() -> None:
    def other_gpus(view: View) -> None:
        assert view.records is not None
        claim = view.records["uid-b"].claim
        moved = Claim(claim.uid, claim.pod, claim.node, (2, 3))
        view.records["uid-b"] = Record(moved, "bound", 3)
        view.owners["n2"] = {2: Owner("uid-b", "", 3), 3: Owner("uid-b", "", 3)}

    def bound_but_pending(view: View) -> None:
        assert view.records is not None
        view.records["uid-c"] = Record(Claim("uid-c", "default/c", "n2", (2, 3)), "bound", 3)

    def reserved_with_nothing_in_flight(view: View) -> None:
        assert view.records is not None
        view.records["uid-c"] = Record(Claim("uid-c", "default/c", "n2", (2, 3)), "reserved", 3)

    assert [(v.rule, v.subject) for v in broken(other_gpus)] == [
        (STORE_DISAGREES, "default/b"),
        (STORE_MISSING, "default/b"),
        (STORE_MISSING, "default/b"),
    ]
    assert broken(bound_but_pending) == [
        Violation(STORE_DISAGREES, "default/c", "recorded bound on n2, on no node")
    ]
    assert broken(reserved_with_nothing_in_flight) == [
        Violation(STORE_DISAGREES, "default/c", "recorded reserved on n2 with nothing in flight")
    ]


def test_without_a_store_the_store_rules_are_skipped() -> None:
    def change(view: View) -> None:
        view.records = None
        view.owners = {}
        view.gangs = {}

    assert broken(change) == []


# ---- until_settled ----------------------------------------------------------------------------


async def test_until_settled_keeps_every_safety_violation_and_retries_failed_reads() -> None:
    twice = clean()
    twice.pods.append(pod("d", 1, "n2", (1,)))
    fits = clean()
    fits.pods.append(pod("d", 2))
    views: list[View | Exception] = [RuntimeError("apiserver down"), twice, fits, clean()]

    async def read() -> View:
        item = views.pop(0)
        if isinstance(item, Exception):
            raise item
        return item

    settled = await until_settled(read, timeout_s=10, interval_s=0)
    assert settled.violations == [] and settled.rounds == 4
    assert [v.rule for v in settled.safety] == [GPU_HELD_TWICE]
    assert not settled.clean
    assert {v.rule for v in settled.seen} >= {"unread", GPU_HELD_TWICE, FITS_BUT_PENDING}


async def test_until_settled_gives_up_at_its_deadline() -> None:
    async def read() -> View:
        view = clean()
        view.pods.append(pod("d", 2))
        return view

    settled = await until_settled(read, timeout_s=0.05, interval_s=0.01)
    assert settled.violations == [Violation(FITS_BUT_PENDING, "default/d", "fits on n2")]
    assert not settled.clean and settled.safety == []
    assert "still: fits-but-pending: default/d: fits on n2" in settled.report()


# ---- snapshot drift: a replica's running sums against a fresh LIST ----------------------------


def foreign(name: str, on: str, cpu: str = "1", port: int = 0) -> dict[str, Any]:
    """A running pod of another scheduler without GPUs (a Job's, a DaemonSet's)."""
    container: dict[str, Any] = {"name": "main", "resources": {"requests": {"cpu": cpu}}}
    if port:
        container["ports"] = [{"containerPort": port, "hostPort": port}]
    return {
        "metadata": {"name": name, "namespace": "jobs", "uid": f"uid-{name}"},
        "spec": {"schedulerName": "default-scheduler", "nodeName": on, "containers": [container]},
        "status": {"phase": "Running"},
    }


def with_snapshot(view: View, pods: list[dict[str, Any]]) -> View:
    """``view`` with a replica whose snapshot was charged with ``pods`` (its watch saw them)."""
    state = ClusterState()
    for n in view.nodes:
        state.set_node(convert_node(n))
    for p in pods:
        state.add_bound_pod(convert_pod(p))
    view.snapshots = {"leader": nodesums.held(state)}
    return view


def test_a_snapshot_equal_to_the_list_has_no_drift() -> None:
    view = clean()
    view.pods = [*view.pods, foreign("job-0", "n2", "1500m", port=8080)]
    with_snapshot(view, [p for p in view.pods if p["spec"].get("nodeName")])
    assert audit(view) == []
    sums = view.snapshots["leader"]["n2"]
    assert (sums.pods, sums.requested, sums.ports) == (2, {"cpu": 1500}, ("TCP/0.0.0.0:8080",))
    assert sums.gpus == {"default/b": (0, 1)}


def test_a_pod_that_left_but_is_still_charged_is_drift() -> None:
    """Issue 20's drift 1: a Job's pod finished, the snapshot still charges it."""
    view = clean()
    job = foreign("job-0", "n2", "1500m", port=8080)
    with_snapshot(view, [p for p in view.pods if p["spec"].get("nodeName")] + [job])
    done = copy.deepcopy(job)
    done["status"]["phase"] = "Succeeded"
    view.pods = [*view.pods, done]
    assert audit(view) == [
        Violation(SNAPSHOT_DRIFT, "leader:n2", "2 pods, listed 1"),
        Violation(SNAPSHOT_DRIFT, "leader:n2", "ports ['TCP/0.0.0.0:8080'], listed []"),
        Violation(SNAPSHOT_DRIFT, "leader:n2", "requested {'cpu': 1500}, listed {}"),
    ]


def test_a_gpu_holder_the_list_does_not_show_is_drift() -> None:
    view = clean()
    with_snapshot(view, [p for p in view.pods if p["spec"].get("nodeName")])
    view.pods = [p for p in view.pods if p["metadata"]["name"] != "b"]
    view.records = None  # the store's own complaints are not this test's
    assert audit(view) == [
        Violation(FITS_BUT_PENDING, "default/c", "fits on n2"),
        Violation(SNAPSHOT_DRIFT, "leader:n2", "1 pods, listed 0"),
        Violation(SNAPSHOT_DRIFT, "leader:n2", "GPU holders {'default/b': (0, 1)}, listed {}"),
    ]


# ---- DRA: devices in ResourceClaims ------------------------------------------------------------

DRIVER = "gpu.nvidia.com"


def claim(
    name: str, devices: tuple[str, ...] = (), node: str = "n1", reserved: tuple[str, ...] = ()
) -> dict[str, Any]:
    """A ResourceClaim, allocated with ``devices`` of ``node``'s pool (none: not allocated) and
    reserved for the pods named (by UID)."""
    status: dict[str, Any] = {}
    if devices:
        status["allocation"] = {
            "devices": {
                "results": [
                    {"request": "gpus", "driver": DRIVER, "pool": node, "device": d}
                    for d in devices
                ]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            },
        }
    if reserved:
        status["reservedFor"] = [
            {"resource": "pods", "name": r, "uid": f"uid-{r}"} for r in reserved
        ]
    return {
        "metadata": {"name": name, "namespace": "default", "uid": f"cuid-{name}"},
        "status": status,
    }


def dra_pod(
    name: str, claims: tuple[str, ...], on: str = "", scheduler: str = NAME
) -> dict[str, Any]:
    """A pod asking for no GPU resource, whose template claims are ``claims``."""
    p = pod(name, 0, on, scheduler=scheduler)
    p["spec"]["resourceClaims"] = [
        {"name": f"r{i}", "resourceClaimTemplateName": "t"} for i in range(len(claims))
    ]
    p["status"]["resourceClaimStatuses"] = [
        {"name": f"r{i}", "resourceClaimName": c} for i, c in enumerate(claims)
    ]
    return p


def dra_view() -> View:
    """n1 and n2 of the clean view, no store: d1 bound on n1 with claim c1 (gpu-0 and gpu-1 of
    n1), d2 pending with claim c2 not allocated yet, and a pod of another scheduler bound on n2
    with claim k1 (gpu-0 of n2)."""
    pods = [
        dra_pod("d1", ("c1",), "n1"),
        dra_pod("d2", ("c2",)),
        dra_pod("k", ("k1",), "n2", scheduler="other"),
    ]
    claims = [
        claim("c1", ("gpu-0", "gpu-1"), "n1", ("d1",)),
        claim("c2"),
        claim("k1", ("gpu-0",), "n2", ("k",)),
    ]
    return View(NAME, pods, [node("n1"), node("n2")], claims=claims)


def test_the_clean_dra_view_has_no_violation() -> None:
    assert audit(dra_view()) == []


def test_a_device_in_two_claims_of_running_pods_is_held_twice() -> None:
    view = dra_view()
    view.pods[1] = dra_pod("d2", ("c2",), "n2")
    view.claims[1] = claim("c2", ("gpu-0",), "n2", ("d2",))  # k1's device
    assert audit(view) == [
        Violation(DEVICE_HELD_TWICE, f"{DRIVER}/n2/gpu-0", "in claims default/c2 and default/k1")
    ]


def test_a_device_in_two_claims_is_not_held_twice_while_one_pod_is_pending_or_finished() -> None:
    view = dra_view()
    view.claims[1] = claim("c2", ("gpu-0",), "n2", ("d2",))  # d2 is pending
    assert [v.rule for v in audit(view)] == [CLAIM_STRANDED]
    done = dra_pod("d2", ("c2",), "n2")
    done["status"]["phase"] = "Succeeded"
    view.pods[1] = done
    assert [v.rule for v in audit(view)] == [CLAIM_STRANDED]


def test_admin_access_and_shares_hold_no_device() -> None:
    view = dra_view()
    view.pods[1] = dra_pod("d2", ("c2",), "n2")
    shared = claim("c2", ("gpu-0",), "n2", ("d2",))
    shared["status"]["allocation"]["devices"]["results"][0]["adminAccess"] = True
    view.claims[1] = shared
    assert audit(view) == []
    shared["status"]["allocation"]["devices"]["results"][0] |= {"adminAccess": None, "shareID": "s"}
    assert audit(view) == []


def test_an_allocated_claim_of_ours_that_no_running_pod_uses_is_stranded() -> None:
    def gone(view: View) -> None:
        view.claims[0] = claim("c1", ("gpu-0", "gpu-1"), "n1", ("d1", "ghost"))

    def unreserved(view: View) -> None:
        view.claims[1] = claim("c2", ("gpu-2",), "n1")

    def pending(view: View) -> None:
        view.claims[1] = claim("c2", ("gpu-2",), "n1", ("d2",))

    def elsewhere(view: View) -> None:
        view.pods[0] = dra_pod("d1", ("c1",), "n2")

    def deleting(view: View) -> None:
        view.pods[0]["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"

    for change, subject, says in (
        (gone, "default/c1", "reserved for pod UID uid-ghost, which does not exist"),
        (unreserved, "default/c2", "allocated, reserved for no pod"),
        (pending, "default/c2", "reserved for default/d2, which is not bound"),
        (
            elsewhere,
            "default/c1",
            "reserved for default/d1, bound to n2, which the allocation misses",
        ),
        (deleting, "default/c1", "reserved for pod UID uid-d1, which is not live"),
    ):
        view = dra_view()
        change(view)
        assert audit(view) == [Violation(CLAIM_STRANDED, subject, says)], change.__name__


def test_another_schedulers_claim_is_not_ours_to_call_stranded() -> None:
    view = dra_view()
    view.claims[2] = claim("k1", ("gpu-0",), "n2")
    assert audit(view) == []


def test_a_bound_pod_of_ours_whose_claim_is_not_allocated_or_reserved_for_it() -> None:
    view = dra_view()
    view.claims[0] = claim("c1")
    assert audit(view) == [Violation(CLAIM_UNRESERVED, "default/d1", "claim c1 not allocated")]
    view.claims[0] = claim("c1", ("gpu-0",), "n1", ("d2",))  # for the pending d2
    assert audit(view) == [
        Violation(CLAIM_STRANDED, "default/c1", "reserved for default/d2, which is not bound"),
        Violation(CLAIM_UNRESERVED, "default/d1", "claim c1 not reserved for it"),
    ]


def test_a_dra_backed_gpu_request_needs_no_device_annotation() -> None:
    view = dra_view()
    special = pod("e", 2, "n1")  # nvidia.com/gpu: 2, its devices annotation empty
    view.pods.append(special)
    assert [v.rule for v in audit(view)] == [BAD_ASSIGNMENT]
    special["status"]["extendedResourceClaimStatus"] = {"resourceClaimName": "e-x"}
    view.claims.append(claim("e-x", ("gpu-4", "gpu-5"), "n1", ("e",)))
    assert audit(view) == []
