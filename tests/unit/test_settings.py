"""Tuning values are settings (issue 31): today's values are the defaults, every range is checked
with the field's path, a value set in the file reaches the part that uses it (the core through
``simulate --config`` as through ``run``), and no test monkeypatches a constant instead."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from scheduler.agent.plugin.host import plugin_config
from scheduler.agent.plugin.server import PluginConfig
from scheduler.cli import main
from scheduler.config import Config, ConfigError, Preemption, parse_config
from scheduler.config.agent import DevicePluginSettings
from scheduler.config.ranges import RANGES
from scheduler.config.tuning import Tuning
from scheduler.core.settings import (
    CoreSettings,
    FragmentationSettings,
    MemoSettings,
    PreemptionSettings,
    TopologySettings,
)
from scheduler.core.snapshot.cluster import ClusterState
from scheduler.kube.tuning import WatchTiming
from scheduler.kube.watch import Reflector
from scheduler.state.memory import MemoryStore
from tests.clock import ManualClock
from tests.lifecycle import Apiserver, Replica

REPO = Path(__file__).resolve().parents[2]


def test_the_defaults_are_the_values_the_constants_had() -> None:
    assert CoreSettings().fragmentation == FragmentationSettings(
        coverage_percent=95,
        min_pods=32,
        stranded_weight=4,
        contest_weight=4,
        contest_cap_percent=100,
        memo_shapes=1 << 16,
    )
    assert CoreSettings().preemption == PreemptionSettings(
        min_candidate_nodes=100, min_candidate_nodes_percent=10, max_candidate_domains=16
    )
    assert CoreSettings().topology == TopologySettings(max_plans=8)
    assert CoreSettings().memos == MemoSettings(
        asks=1024, requests=1024, quantities=4096, best_sets=20_000
    )
    assert Preemption() == Preemption(hold_seconds=300, retry_seconds=30.0)
    assert Tuning() == Tuning(
        batch_pods=32,
        bind_attempts=3,
        bind_retry_seconds=0.5,
        check_retry_seconds=1.0,
        rebind_seconds=1.0,
        bind_commit_seconds=60.0,
        pod_initial_backoff_seconds=1.0,
        pod_max_backoff_seconds=10.0,
        pod_max_unschedulable_seconds=300.0,
        store_reconcile_seconds=2.0,
        store_write_batch=1000,
        store_mark_seconds=0.02,
        store_reconcile_chunk=2000,
        redis_timeout_seconds=2.0,
        sentinel_timeout_seconds=0.5,
        inventory_flush_seconds=0.05,
        api_connections=32,
        api_timeout_seconds=30.0,
        list_page_size=2000,
        pod_group_patches_in_flight=4,
        pod_group_pass_seconds=0.2,
        pod_group_idle_seconds=1.0,
        crd_check_seconds=60.0,
        crd_retry_seconds=5.0,
        event_queue_size=1000,
        loop_tick_seconds=1.0,
        shutdown_drain_seconds=20.0,
        shutdown_release_seconds=3.0,
        shutdown_step_seconds=1.0,
        shutdown_events_seconds=5.0,
        watch_timeout_seconds=300,
        watch_backoff_seconds=0.5,
        watch_backoff_max_seconds=10.0,
        list_decode_slice=250,
    )
    # The config's defaults are the core's.
    assert Config().to_core() == CoreSettings()


def _document(path: str, value: Any) -> dict[str, Any]:
    """{"a": {"b": value}} for "a.b"."""
    doc: Any = value
    for name in reversed(path.split(".")):
        doc = {name: doc}
    assert isinstance(doc, dict)
    return doc


def _outside(path: str) -> float:
    allowed = RANGES[path]
    if allowed.high is not None:
        return allowed.high + 1
    return allowed.low if allowed.above else allowed.low - 1


@pytest.mark.parametrize("path", sorted(RANGES))
def test_a_value_out_of_its_range_is_a_config_error_naming_the_field(path: str) -> None:
    bad = _outside(path)
    # Integer fields take an integer: the range is what fails, not the type.
    value = int(bad) if bad == int(bad) else bad
    with pytest.raises(ConfigError) as exc:
        parse_config(_document(path, value))
    assert f"{path}: must {RANGES[path].describe()}" in str(exc.value)


def test_every_range_names_a_numeric_field_of_the_file() -> None:
    for path in RANGES:
        section, *rest = path.split(".")
        typ: Any = Config
        for name in [section, *rest]:
            fields = {f.encode_name: f.type for f in msgspec.structs.fields(typ)}
            assert name in fields, path
            typ = fields[name]
        assert typ in (int, float), path


def test_range_problems_are_collected_with_the_others() -> None:
    with pytest.raises(ConfigError) as exc:
        parse_config(
            {
                "fragmentation": {"coveragePercent": 0, "minPods": 0},
                "run": {"tuning": {"podInitialBackoffSeconds": 5, "podMaxBackoffSeconds": 2}},
                "preemption": {"minCandidateNodesPercent": 101},
            }
        )
    text = str(exc.value)
    assert "4 problems" in text
    assert "fragmentation.coveragePercent: must be between 1 and 100" in text
    assert "fragmentation.minPods: must be at least 1" in text
    assert "preemption.minCandidateNodesPercent: must be between 0 and 100" in text
    assert "run.tuning.podMaxBackoffSeconds: must not be below podInitialBackoffSeconds" in text


def test_the_files_core_values_reach_core_settings() -> None:
    core = parse_config(
        {
            "fragmentation": {
                "strandedWeight": 3,
                "memoShapes": 9,
                "minPods": 2,
                "contestWeight": 5,
                "contestCapPercent": 150,
            },
            "preemption": {
                "minCandidateNodes": 7,
                "minCandidateNodesPercent": 50,
                "maxCandidateDomains": 3,
            },
            "topology": {"maxPlans": 2},
            "memos": {"asks": 5, "requests": 6, "quantities": 7, "bestSets": 8},
        }
    ).to_core()
    assert core.fragmentation == FragmentationSettings(
        stranded_weight=3, memo_shapes=9, min_pods=2, contest_weight=5, contest_cap_percent=150
    )
    assert core.preemption == PreemptionSettings(7, 50, 3)
    assert core.topology.max_plans == 2
    memos = ClusterState(core).memos
    assert (memos.asks.limit, memos.requests.limit, memos.quantities.limit) == (5, 6, 7)
    assert memos.topologies.intern([[0, 1], [1, 0]]).best_set_limit == 8


def test_run_tuning_reaches_the_part_that_uses_each_value() -> None:
    tuning = Tuning(
        batch_pods=7,
        bind_attempts=5,
        bind_retry_seconds=0.25,
        check_retry_seconds=3.0,
        rebind_seconds=4.0,
        bind_commit_seconds=30.0,
        pod_initial_backoff_seconds=2.0,
        pod_max_backoff_seconds=20.0,
        pod_max_unschedulable_seconds=60.0,
        store_reconcile_seconds=9.0,
        store_write_batch=11,
        store_mark_seconds=0.3,
        inventory_flush_seconds=0.5,
        pod_group_patches_in_flight=2,
        pod_group_pass_seconds=0.3,
        pod_group_idle_seconds=4.0,
        event_queue_size=12,
        loop_tick_seconds=0.5,
        shutdown_events_seconds=2.0,
    )
    clock = ManualClock(0.0)
    s = Replica(Apiserver(), MemoryStore(clock), clock, tuning=tuning).s
    assert s.cycle.batch_pods == 7
    assert (s.binder.attempts, s.binder.retry_s) == (5, 0.25)
    assert (s.effects.check_retry_s, s.effects.rebind_s) == (3.0, 4.0)
    assert s.bind_commit_s == 30.0
    assert (s.sync.reconcile_min_s, s.sync.write_batch, s.sync.mark_delay_s) == (9.0, 11, 0.3)
    assert s.sync.inventories.flush_delay_s == 0.5
    assert (s.preemptions.hold_s, s.preemptions.retry_s) == (300, 30.0)
    assert (
        s.statuses.patches_in_flight,
        s.statuses.pass_interval_s,
        s.statuses.idle_pass_s,
    ) == (2, 0.3, 4.0)
    assert s.effects.events.size == 12
    assert (s.tick_s, s.events_close_s) == (0.5, 2.0)
    s.queue.add("p")
    assert s.queue.pop() == "p"
    assert [s.queue.backoff("p") for _ in range(5)] == [2.0, 4.0, 8.0, 16.0, 20.0]
    s.queue.delete("p")
    s.queue.unschedulable("q")
    assert s.queue.next_wakeup() == 60.0


class Item(msgspec.Struct):
    name: str


async def test_the_watch_timing_reaches_the_reflector() -> None:
    tuning = Tuning(
        watch_timeout_seconds=7,
        watch_backoff_seconds=0.25,
        watch_backoff_max_seconds=0.4,
        list_decode_slice=3,
    )
    assert tuning.watch_timing() == WatchTiming(7, 0.25, 0.4, 3)
    naps: list[float] = []
    timeouts: list[int] = []
    failures = [3]

    async def sleep(seconds: float) -> None:
        naps.append(seconds)

    async def list_call() -> bytes:
        if failures[0]:
            failures[0] -= 1
            raise RuntimeError("apiserver down")
        return b'{"metadata": {"resourceVersion": "1"}, "items": []}'

    async def watch_call(version: str, timeout: int) -> AsyncIterator[bytes]:
        timeouts.append(timeout)
        raise asyncio.CancelledError

    reflector = Reflector(
        "items",
        Item,
        list_call,
        watch_call,
        lambda items: None,
        lambda kind, item: None,
        lambda item: "",
        sleep=sleep,
        timing=tuning.watch_timing(),
    )
    with pytest.raises(asyncio.CancelledError):
        await reflector.run()
    assert naps == [0.25, 0.4, 0.4]  # the backoff doubles, up to its max
    assert timeouts == [7]


def test_the_device_plugins_timings_reach_its_server() -> None:
    settings = DevicePluginSettings(
        socket_check_seconds=3.0,
        register_timeout_seconds=4.0,
        report_interval_seconds=0.5,
        report_tries=6,
        published_pods=7,
    )
    config = plugin_config(settings)
    assert (config.watch_interval, config.register_timeout) == (3.0, 4.0)
    assert (config.report_interval, config.report_tries, config.published_pods) == (0.5, 6, 7)
    # The file's defaults are the server's own.
    assert plugin_config(DevicePluginSettings()) == PluginConfig()


def _node(name: str, gpus: int, cpu: str) -> str:
    devices = ", ".join(f'{{"index": {i}}}' for i in range(gpus))
    return f"""apiVersion: v1
kind: Node
metadata:
  name: {name}
  annotations:
    topo-scheduler.io/gpus: '{{"vendor": "nvidia", "devices": [{devices}]}}'
status:
  allocatable: {{cpu: "{cpu}", memory: 256Gi, pods: "110", nvidia.com/gpu: "{gpus}"}}
"""


def _pod(name: str, bound: str = "") -> str:
    on = f"  nodeName: {bound}\n" if bound else ""
    held = "  annotations:\n    topo-scheduler.io/devices: '0'\n" if bound else ""
    return f"""apiVersion: v1
kind: Pod
metadata:
  name: {name}
{held}spec:
  schedulerName: topo-scheduler
{on}  containers:
  - name: main
    resources:
      requests: {{cpu: "8", memory: 1Gi}}
      limits: {{nvidia.com/gpu: 1}}
"""


def test_simulate_config_reaches_the_core_and_changes_a_decision(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a and b both have two free GPUs (the same smallest fit). By default one held pod is too
    # few for a target workload, so the name decides (a); with fragmentation.minPods 1 the held
    # pod (one GPU, 8 cpu) is the workload, and on a the pod's 8 cpu would leave 4, too few to
    # feed a's other GPU: the measure sends it to b.
    cluster = tmp_path / "cluster.yaml"
    docs = [_node("a", 2, "12"), _node("b", 2, "64"), _node("fill", 1, "64")]
    cluster.write_text("\n---\n".join([*docs, _pod("held", bound="fill"), _pod("p")]))
    config = tmp_path / "scheduler.yaml"
    config.write_text("fragmentation:\n  minPods: 1\n")

    def node_of_p(*args: str) -> str:
        assert main(["simulate", "-o", "json", *args, str(cluster)]) == 0
        (placement,) = json.loads(capsys.readouterr().out)["placements"]
        assert placement["pod"] == "default/p"
        return str(placement["node"])

    assert node_of_p() == "a"
    assert node_of_p("--config", str(config)) == "b"


def test_no_test_monkeypatches_a_constant_of_the_scheduler() -> None:
    # Settings are passed, not patched: monkeypatching a function to inject a failure is fine,
    # replacing an UPPER_CASE value of a scheduler module is not.
    patched = re.compile(r"monkeypatch\.setattr\(\s*[\w.]+,\s*[\"'][A-Z][A-Z0-9_]*[\"']")
    found = [
        f"{path.relative_to(REPO)}: {match.group(0)}"
        for path in sorted((REPO / "tests").rglob("*.py"))
        for match in patched.finditer(path.read_text())
    ]
    assert found == []
