"""`topo-scheduler simulate` end to end through the CLI, on files in a temporary folder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from scheduler.cli import main

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "configs" / "examples"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


NODE = """
apiVersion: v1
kind: Node
metadata:
  name: n1
  annotations:
    topo-scheduler.io/gpus: '{"vendor": "nvidia",
      "devices": [{"index": 0}, {"index": 1}, {"index": 2}, {"index": 3}],
      "scores": [[0,100,100,200],[100,0,200,100],[100,200,0,200],[200,100,200,0]]}'
"""


def pod(name: str, gpus: int, extra: str = "", scheduler: str = "topo-scheduler") -> str:
    return f"""
apiVersion: v1
kind: Pod
metadata:
  name: {name}
{extra}
spec:
  schedulerName: {scheduler}
  containers:
  - name: main
    resources:
      limits:
        nvidia.com/gpu: {gpus}
"""


def write(tmp_path: Path, name: str, *docs: str) -> str:
    path = tmp_path / name
    path.write_text("\n---\n".join(docs))
    return str(path)


def test_json_output_follows_the_contract(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gang = "  labels:\n    gpu-topology: job\n    gpu-topology-replica: '2'"
    f = write(
        tmp_path, "c.yaml", NODE, pod("a", 1), pod("g0", 1, gang), pod("g1", 1, gang), pod("big", 8)
    )
    code, out, _ = run(capsys, "simulate", "-o", "json", f)
    assert code == 0
    doc = json.loads(out)
    assert set(doc) == {"placements", "pending", "preemptions", "warnings", "summary"}
    assert doc["preemptions"] == []
    assert doc["placements"][0] == {"pod": "default/a", "node": "n1", "devices": [0], "gang": None}
    gangs = {p["pod"]: p for p in doc["placements"][1:]}
    assert {p["gang"] for p in gangs.values()} == {"default/job"}
    # GPU 0 is taken: (1,2) and (2,3) are 200-pairs with equal damage; the lower indices win.
    assert sorted(d for p in gangs.values() for d in p["devices"]) == [1, 2]
    assert doc["pending"] == [
        {
            "pod": "default/big",
            "reason": "0/1 nodes are available: 1 has fewer than 8 GPUs in total.",
            "state": "unschedulable",
        }
    ]
    assert doc["summary"]["podsPlaced"] == 3 and doc["summary"]["gpusAllocated"] == 3


def test_preemptions_show_the_victims_and_the_preemptor_takes_their_place(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    low = "  labels:\n    gpu-topology: low\n    gpu-topology-replica: '2'"
    running = "\n  nodeName: n1"
    f = write(
        tmp_path,
        "c.yaml",
        NODE,
        pod("low-0", 2, low).replace("  schedulerName", running.strip("\n") + "\n  schedulerName")
        + "  priority: 10\n",
        pod("low-1", 2, low).replace("  schedulerName", running.strip("\n") + "\n  schedulerName")
        + "  priority: 10\n",
        pod("big", 4) + "  priority: 1000\n",
        pod("peer", 2) + "  priority: 10\n",
    )
    code, out, _ = run(capsys, "simulate", "-o", "json", f)
    assert code == 0
    doc = json.loads(out)
    assert doc["preemptions"] == [
        {"pod": "default/big", "victims": ["default/low-0", "default/low-1"]}
    ]
    assert {p["pod"]: p["devices"] for p in doc["placements"]} == {"default/big": [0, 1, 2, 3]}
    assert [p["pod"] for p in doc["pending"]] == ["default/peer"]  # equal priority evicts none
    assert doc["summary"]["podsPreempted"] == 2
    code, table, _ = run(capsys, "simulate", f)
    assert "PREEMPTED" in table and "default/big (priority 1000) preempts 2 pod(s)" in table


def test_table_shows_each_gpu_holder_and_pending_reasons(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = write(tmp_path, "c.yaml", NODE, pod("a", 2), pod("b", 4))
    code, out, _ = run(capsys, "simulate", f)
    assert code == 0
    assert "NODE n1" in out
    assert "+ default/a" in out
    assert "PENDING" in out and "default/b" in out and "fewer than 4 free GPUs" in out


def test_kind_list_and_json_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    items = [yaml.safe_load(NODE), yaml.safe_load(pod("a", 1))]
    path = tmp_path / "list.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    code, out, _ = run(capsys, "simulate", "-o", "json", str(path))
    assert code == 0
    assert json.loads(out)["placements"][0]["node"] == "n1"


def test_running_pods_hold_their_annotated_gpus(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    running = pod("r", 3, "  annotations:\n    topo-scheduler.io/devices: '0,1,3'").replace(
        "spec:\n", "spec:\n  nodeName: n1\n"
    )
    f = write(tmp_path, "c.yaml", NODE, running, pod("a", 1))
    code, out, _ = run(capsys, "simulate", "-o", "json", f)
    assert code == 0
    assert json.loads(out)["placements"] == [
        {"pod": "default/a", "node": "n1", "devices": [2], "gang": None}
    ]


def test_pods_of_other_schedulers_are_ignored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = write(tmp_path, "c.yaml", NODE, pod("theirs", 1, scheduler="default-scheduler"))
    code, out, _ = run(capsys, "simulate", "-o", "json", f)
    doc = json.loads(out)
    assert code == 0 and doc["placements"] == [] and doc["summary"]["podsIgnored"] == 1


def test_yaml_error_exits_2_naming_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = write(tmp_path, "broken.yaml", NODE, "kind: Pod\nmetadata: {name: x\n")
    code, out, err = run(capsys, "simulate", f)
    assert code == 2 and out == ""
    assert "broken.yaml:" in err and "YAML error" in err
    line = int(err.split("broken.yaml:")[1].split(":")[0])
    assert line > 9  # in the second document, not the first


def test_bad_pod_field_exits_2_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = pod("a", 1).replace("  containers:\n", "  containers: 7\n  x:\n")
    f = write(tmp_path, "bad.yaml", NODE, bad)
    code, _, err = run(capsys, "simulate", f)
    assert code == 2
    assert "bad.yaml:" in err and "spec.containers" in err


def test_missing_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "simulate", str(tmp_path / "nope.yaml"))
    assert code == 2 and "nope.yaml: cannot read" in err


def test_malformed_inventory_is_a_warning_not_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = NODE.replace('"vendor": "nvidia"', '"vendor": "amd"')
    f = write(tmp_path, "c.yaml", broken, pod("a", 1))
    code, out, _ = run(capsys, "simulate", "-o", "json", f)
    doc = json.loads(out)
    assert code == 0
    assert doc["warnings"] == [
        "node n1: annotation topo-scheduler.io/gpus: vendor: 'amd' is not one of nvidia, metax; "
        "node excluded from GPU scheduling"
    ]
    assert doc["pending"][0]["reason"] == "0/1 nodes are available: 1 has an invalid GPU inventory."


@pytest.mark.parametrize(
    "cluster,workload,placed",
    [
        ("dgx1-v100.yaml", "workload-single.yaml", 3),
        ("dgx1-v100.yaml", "workload-multi.yaml", 3),
        ("dgx1-v100.yaml", "workload-gang.yaml", 6),
        ("pcie-8gpu.yaml", "workload-multi.yaml", 3),
        ("metax-c500.yaml", "workload-shared.yaml", 6),
        ("seed003.yaml", "workload-single.yaml", 3),
        ("dgx1-v100.yaml", "workload-mixed.yaml", 6),
        ("cluster-kubernetes.yaml", "workload-kubernetes.yaml", 3),
    ],
)
def test_every_example_simulates(
    cluster: str, workload: str, placed: int, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(
        capsys, "simulate", "-o", "json", str(EXAMPLES / cluster), str(EXAMPLES / workload)
    )
    assert code == 0
    doc = json.loads(out)
    assert doc["summary"]["podsPlaced"] == placed, doc["pending"]
    assert doc["warnings"] == []


def test_seed004_gang_example_lands_on_an_nvlink_pair(capsys: pytest.CaptureFixture[str]) -> None:
    _code, out, _ = run(
        capsys,
        "simulate",
        "-o",
        "json",
        str(EXAMPLES / "dgx1-v100.yaml"),
        str(EXAMPLES / "workload-gang.yaml"),
    )
    doc = json.loads(out)
    pair = [p for p in doc["placements"] if p["gang"] == "default/pytorch-dist-nccl"]
    assert len({p["node"] for p in pair}) == 1
    gpus = sorted(p["devices"][0] for p in pair)
    nv2 = [[0, 3], [0, 4], [1, 2], [1, 5], [2, 3], [4, 7], [5, 6], [6, 7]]
    assert gpus in nv2


def test_seed003_example_prefers_the_smaller_node(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    f = write(tmp_path, "w.yaml", pod("two", 2))
    _code, out, _ = run(capsys, "simulate", "-o", "json", str(EXAMPLES / "seed003.yaml"), f)
    assert json.loads(out)["placements"][0]["node"] == "node1"


def test_config_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("defaults:\n  nodePolicy: fastest\n")
    code, _, err = run(capsys, "simulate", "--config", str(cfg), str(EXAMPLES / "seed003.yaml"))
    assert code == 2 and "defaults.nodePolicy" in err


def test_unquoted_timestamps_stay_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stamped = "  creationTimestamp: 2026-01-01T00:00:00Z"
    f = write(tmp_path, "c.yaml", NODE + stamped + "\n", pod("a", 1, stamped))
    code, out, err = run(capsys, "simulate", "-o", "json", f)
    assert code == 0, err
    assert json.loads(out)["placements"][0]["pod"] == "default/a"


def test_a_pod_defined_twice_counts_once_as_its_last_definition(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = write(tmp_path, "c.yaml", NODE, pod("a", 1), pod("a", 2))
    code, out, _ = run(capsys, "simulate", "-o", "json", f)
    doc = json.loads(out)
    assert code == 0
    assert [(p["pod"], len(p["devices"])) for p in doc["placements"]] == [("default/a", 2)]
    assert doc["warnings"] == ["pod default/a: defined twice; the last definition wins"]
    assert doc["summary"]["gpusAllocated"] == 2


def test_pending_pods_being_deleted_are_ignored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    deleting = pod("gone", 1, "  deletionTimestamp: '2026-01-01T00:00:00Z'")
    f = write(tmp_path, "c.yaml", NODE, deleting)
    code, out, _ = run(capsys, "simulate", "-o", "json", f)
    doc = json.loads(out)
    assert code == 0 and doc["placements"] == [] and doc["pending"] == []
    assert doc["summary"]["podsIgnored"] == 1


def test_table_without_gpu_nodes_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = write(tmp_path, "c.yaml", pod("a", 1))
    code, out, _ = run(capsys, "simulate", f)
    assert code == 0
    assert "No GPU nodes in the input." in out and "placed by this simulation" not in out
    assert "default/a  [unschedulable]  0/0 nodes are available" in out


CLUSTERS = sorted(p.name for p in EXAMPLES.glob("*.yaml") if not p.name.startswith("workload-"))
WORKLOADS = sorted(p.name for p in EXAMPLES.glob("workload-*.yaml"))


def _our_pending_pods(path: Path) -> int:
    import yaml

    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    return sum(
        1
        for d in docs
        if d.get("kind") == "Pod"
        and d["spec"].get("schedulerName") == "topo-scheduler"
        and not d["spec"].get("nodeName")
    )


@pytest.mark.parametrize("cluster", CLUSTERS)
@pytest.mark.parametrize("workload", WORKLOADS)
def test_every_workload_runs_against_every_cluster(
    cluster: str, workload: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(
        capsys, "simulate", "-o", "json", str(EXAMPLES / cluster), str(EXAMPLES / workload)
    )
    assert code == 0, err
    doc = json.loads(out)
    # Every pod of ours ends up exactly once: placed or pending with a reason.
    pods = [p["pod"] for p in doc["placements"]] + [p["pod"] for p in doc["pending"]]
    assert len(pods) == len(set(pods)) == _our_pending_pods(EXAMPLES / workload)
    assert all(p["reason"] for p in doc["pending"])
    assert doc["summary"]["gpusAllocated"] <= doc["summary"]["gpus"]


def test_examples_cover_the_clusters_and_workloads_the_docs_name() -> None:
    assert {"dgx1-v100.yaml", "pcie-8gpu.yaml", "metax-c500.yaml", "seed003.yaml"} <= set(CLUSTERS)
    assert "cluster-kubernetes.yaml" in CLUSTERS and "workload-kubernetes.yaml" in WORKLOADS
    assert len(WORKLOADS) == 7


def test_other_kinds_are_skipped_and_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cm = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  a: b\n"
    f = write(tmp_path, "c.yaml", cm, NODE, pod("a", 1), cm.replace("name: c", "name: d"))
    code, out, _ = run(capsys, "simulate", "-o", "json", f)
    assert code == 0
    assert json.loads(out)["summary"]["objectsIgnored"] == 2
    theirs = pod("theirs", 1, scheduler="default-scheduler")
    code, out, _ = run(capsys, "simulate", write(tmp_path, "d.yaml", cm, NODE, theirs))
    assert code == 0 and "Ignored: 1 pods not ours to schedule, 1 ConfigMap." in out


def test_a_bad_map_value_is_named_by_its_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    unquoted = "  labels:\n    gpu-topology: job\n    gpu-topology-replica: 2"
    f = write(tmp_path, "c.yaml", NODE, pod("a", 1, unquoted))
    code, _, err = run(capsys, "simulate", f)
    assert code == 2
    # Line 13: the second document's first line (NODE is 9 lines, then a blank line, "---", and
    # the blank line pod() starts with).
    assert "c.yaml:13: Pod metadata.labels[gpu-topology-replica]: Expected `str`, got `int`" in err
    listed = {"kind": "List", "items": [yaml_of(pod("b", 1)), yaml_of(pod("c", 1))]}
    listed["items"][1]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = [1]
    path = tmp_path / "l.json"
    path.write_text(json.dumps(listed))
    code, _, err = run(capsys, "simulate", str(path))
    assert code == 2
    assert "l.json:1: Pod items[1].spec.containers[0].resources.limits[nvidia.com/gpu]:" in err


def yaml_of(text: str) -> dict[str, Any]:
    import yaml

    doc: dict[str, Any] = yaml.safe_load(text)
    return doc


def test_a_running_pod_naming_a_gpu_the_node_lacks_is_warned_about(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    running = pod("r", 2, "  annotations:\n    topo-scheduler.io/devices: '1,9'").replace(
        "spec:\n", "spec:\n  nodeName: n1\n"
    )
    f = write(tmp_path, "c.yaml", NODE, running)
    code, out, _ = run(capsys, "simulate", "-o", "json", f)
    doc = json.loads(out)
    assert code == 0
    assert doc["warnings"] == ["pod default/r: holds GPU 9 on node n1, which has no such GPU"]
    assert doc["summary"]["gpusAllocated"] == 1


def test_node_status_allocatable_is_checked_and_a_malformed_one_warned_about(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # n1 (no status, as hand-written manifests usually are) is not checked; n2's device plugin
    # registers another resource name; n3's allocatable is malformed. Both allow pods, as every
    # real node does (a status without "pods" allows none, as for kube-scheduler).
    n2 = NODE.replace("name: n1", "name: n2") + (
        "status:\n  allocatable:\n    topo-scheduler.io/gpu: '4'\n    cpu: '8'\n    pods: '110'\n"
    )
    n3 = NODE.replace("name: n1", "name: n3") + (
        "status:\n  allocatable:\n    nvidia.com/gpu: 4x\n    pods: '110'\n"
    )
    f = write(tmp_path, "c.yaml", NODE, n2, n3, pod("a", 4), pod("b", 1))
    code, out, _ = run(capsys, "simulate", "-o", "json", f)
    assert code == 0
    doc = json.loads(out)
    assert [(p["pod"], p["node"]) for p in doc["placements"]] == [("default/a", "n1")]
    assert doc["pending"] == [
        {
            "pod": "default/b",
            "reason": "0/3 nodes are available: 1 has fewer than 1 free GPU, "
            "2 have too little allocatable nvidia.com/gpu.",
            "state": "unschedulable",
        }
    ]
    assert doc["warnings"] == [
        "node n3: status.allocatable[nvidia.com/gpu]: '4x' is not a Kubernetes quantity; "
        "the node is treated as not offering nvidia.com/gpu"
    ]
    code, out, _ = run(capsys, "simulate", f)
    assert "2 have too little allocatable nvidia.com/gpu" in out
    assert "status.allocatable[nvidia.com/gpu]" in out


def test_the_kubernetes_example_reads_like_kube_scheduler(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Priority first, required node affinity and anti-affinity for the workers, a zonal volume,
    a gated pod; the table says why each node refuses the pod that stays pending."""
    files = [str(EXAMPLES / "cluster-kubernetes.yaml"), str(EXAMPLES / "workload-kubernetes.yaml")]
    code, out, _ = run(capsys, "simulate", "-o", "json", *files)
    assert code == 0
    doc = json.loads(out)
    assert {p["pod"]: p["node"] for p in doc["placements"]} == {
        "default/urgent": "g5-c",
        "default/worker-0": "p4d-a",
        "default/worker-1": "p4d-b",
    }
    assert doc["pending"] == [
        {
            "pod": "default/queued",
            "reason": "waiting for scheduling gates: kueue.x-k8s.io/admission",
            "state": "waiting",
        },
        {
            "pod": "default/notebook",
            "reason": "0/3 nodes are available: 1 has fewer than 1 free GPU, "
            "2 node(s) didn't match PersistentVolume's node affinity.",
            "state": "unschedulable",
        },
    ]
    code, out, _ = run(capsys, "simulate", *files)
    assert "      p4d-a: node(s) didn't match PersistentVolume's node affinity\n" in out
    assert "      g5-c: has fewer than 1 free GPU\n" in out


def test_resource_claims_restrict_or_hold_pods_as_live(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    claims = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: nic-n2}
status:
  allocation:
    devices: {results: []}
    nodeSelector:
      nodeSelectorTerms:
      - matchFields: [{key: metadata.name, operator: In, values: [n2]}]
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: nic-free}
spec:
  devices:
    requests:
    - {name: nic, exactly: {deviceClassName: nic.example.com}}
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: nic.example.com}
"""
    n2 = NODE.replace("name: n1", "name: n2")

    def with_claim(name: str, claim: str) -> str:
        return pod(name, 1).replace(
            "  containers:",
            f"  resourceClaims: [{{name: nic, resourceClaimName: {claim}}}]\n  containers:",
        )

    f = write(
        tmp_path, "c.yaml", NODE, n2, claims, with_claim("a", "nic-n2"), with_claim("b", "nic-free")
    )
    code, out, _ = run(capsys, "simulate", "-o", "json", f)
    assert code == 0
    doc = json.loads(out)
    assert [(p["pod"], p["node"]) for p in doc["placements"]] == [("default/a", "n2")]
    (pending,) = doc["pending"]
    assert pending["pod"] == "default/b"
    assert pending["reason"] == "0/2 nodes are available: 2 cannot allocate all claims."


DRA_NODE = """
apiVersion: v1
kind: Node
metadata:
  name: d1
  annotations:
    topo-scheduler.io/gpus: '{"vendor": "nvidia",
      "devices": [{"index": 0, "uuid": "GPU-a"}, {"index": 1, "uuid": "GPU-b"},
                  {"index": 2, "uuid": "GPU-c"}, {"index": 3, "uuid": "GPU-d"}],
      "scores": [[0,10,10,200],[10,0,10,10],[10,10,0,10],[200,10,10,0]]}'
status:
  allocatable: {cpu: "8", pods: "110"}
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: d1-gpus}
spec:
  driver: gpu.nvidia.com
  pool: {name: d1, generation: 1, resourceSliceCount: 1}
  nodeName: d1
  devices:
  - {name: gpu-0, attributes: {uuid: {string: GPU-a}}}
  - {name: gpu-1, attributes: {uuid: {string: GPU-b}}}
  - {name: gpu-2, attributes: {uuid: {string: GPU-c}}}
  - {name: gpu-3, attributes: {uuid: {string: GPU-d}}}
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu.nvidia.com}
spec:
  selectors: [{cel: {expression: "device.driver == 'gpu.nvidia.com'"}}]
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: two-gpus}
spec:
  spec:
    devices:
      requests:
      - {name: gpus, exactly: {deviceClassName: gpu.nvidia.com, count: 2}}
"""


def test_simulate_allocates_claims_from_templates_and_prints_their_devices(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    templated = pod("t", 0).replace(
        "  containers:",
        "  resourceClaims: [{name: gpus, resourceClaimTemplateName: two-gpus}]\n  containers:",
    )
    missing = pod("m", 0).replace(
        "  containers:",
        "  resourceClaims: [{name: gpus, resourceClaimTemplateName: nowhere}]\n  containers:",
    )
    f = write(tmp_path, "d.yaml", DRA_NODE, templated, missing)
    code, out, _ = run(capsys, "simulate", "-o", "json", f)
    assert code == 0
    doc = json.loads(out)
    ((placed),) = doc["placements"]
    assert placed["pod"] == "default/t" and placed["node"] == "d1"
    ((claim),) = placed["claims"]
    assert claim["claim"] == "default/t-gpus" and not claim["special"]
    # The NVLink pair of the node's matrix (GPUs 0 and 3), not the first two devices.
    assert [d["device"] for d in claim["devices"]] == [
        "gpu.nvidia.com/d1/gpu-0",
        "gpu.nvidia.com/d1/gpu-3",
    ]
    (pending,) = doc["pending"]
    assert "waiting for the ResourceClaim of template nowhere" in pending["reason"]
    code, table, _ = run(capsys, "simulate", f)
    assert code == 0
    assert "CLAIMS\n  default/t  d1\n    default/t-gpus: gpu.nvidia.com/d1/gpu-0, " in table


DRAIN_GPU_3 = """
apiVersion: resource.k8s.io/v1
kind: DeviceTaintRule
metadata: {name: drain-gpu-3}
spec:
  deviceSelector: {driver: gpu.nvidia.com, pool: d1, device: gpu-3}
  taint: {key: example.com/drain, effect: NoSchedule}
"""


def test_simulate_keeps_a_device_a_taint_rule_taints_from_the_claims(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    templated = pod("t", 0).replace(
        "  containers:",
        "  resourceClaims: [{name: gpus, resourceClaimTemplateName: two-gpus}]\n  containers:",
    )
    f = write(tmp_path, "d.yaml", DRA_NODE, DRAIN_GPU_3, templated)
    code, out, _ = run(capsys, "simulate", "-o", "json", f)
    assert code == 0
    ((placed),) = json.loads(out)["placements"]
    ((claim),) = placed["claims"]
    # GPU 3 would pair with GPU 0 over NVLink, but the rule taints it.
    assert "gpu.nvidia.com/d1/gpu-3" not in [d["device"] for d in claim["devices"]]
