"""Bad DRA input on the plane (issue 29's "Bad input"): a pod whose claim cannot be allocated for
a reason of its own waits with a clear reason, and the scheduler goes on scheduling other pods.

- a selector that fails at run time (an attribute no device has: CEL's "no such key"); a
  selector with a syntax error never gets that far, the apiserver refuses the claim (checked);
- a claim naming a DeviceClass that does not exist;
- a runaway selector: one whose estimated cost is beyond CEL's limit the apiserver refuses at
  create (422, "exceeds cost limit"), for a claim and for a DeviceClass; one it lets through
  whose comprehensions nest deeper than our bound (cel.py: their iterations multiply) leaves its
  pod pending with that reason (kube-scheduler would evaluate it: it costs little on a device);
- a ResourceSlice of 10,000 devices and a device with a megabyte of attributes: the apiserver
  refuses both (422), so they never reach a watch (the watch's own refusal of such objects, were
  an apiserver to let them through, is tests/unit/test_dra_watches.py's).

After each, other pods still bind.
"""

from __future__ import annotations

import urllib.error
from collections.abc import Callable
from typing import Any

import pytest

from scheduler.testing.dradriver import GPU_DRIVER

from .dra import DraScene
from .dra_shapes import ATTR, claim, exactly, gpus
from .live import Scenario


def test_a_bad_selector_or_a_missing_class_leaves_its_pod_pending_with_a_reason(
    scenario: Scenario, scene: DraScene
) -> None:
    node = scene.node("a")
    scenario.start_scheduler()
    with pytest.raises(urllib.error.HTTPError) as refused:
        scene.claim("syntax", gpus(1, f'device.attributes["{GPU_DRIVER}"].productName =='))
    assert refused.value.code == 422
    missing_key = scene.template("runtime", gpus(1, f'device.attributes["{GPU_DRIVER}"].nosuch'))
    missing_class = scene.template(
        "classless", claim(("gpu", exactly(1, f"no-such-class-{scene.id}")))
    )
    good = scene.template("good", gpus(2))
    bad_pods = {
        "runtime": scene.pod("runtime", scenario.name, templates={"gpus": missing_key}),
        "classless": scene.pod("classless", scenario.name, templates={"gpus": missing_class}),
    }
    good_pods = [scene.pod(f"good-{i}", scenario.name, templates={"gpus": good}) for i in range(2)]

    for name in good_pods:
        verdict = scene.verdict(name)
        assert verdict.node == node, verdict.message or scenario.schedulers[0].tail()
    verdicts = {k: scene.verdict(n) for k, n in bad_pods.items()}
    for kind, verdict in verdicts.items():
        print(f"{kind}: {verdict.message}")
        assert not verdict.feasible, kind
    assert "no such key" in verdicts["runtime"].message
    assert f"no-such-class-{scene.id}" in verdicts["classless"].message
    # The scheduler still decides: one more good pod binds after the bad ones were refused.
    late = scene.pod("good-late", scenario.name, templates={"gpus": good})
    assert scene.verdict(late).node == node, scenario.schedulers[0].tail()


def _refusal(call: Callable[[], object]) -> str:
    """The apiserver's 422 answer to ``call``, as text."""
    with pytest.raises(urllib.error.HTTPError) as refused:
        call()
    body = refused.value.read().decode()
    assert refused.value.code == 422, body
    return body


def _nested(depth: int, items: int) -> str:
    """``depth`` comprehensions nested over lists of ``items`` ints: items ** depth iterations."""
    listed = "[" + ", ".join(str(i) for i in range(items)) + "]"
    names = [f"v{d}" for d in range(depth)]
    inner = " + ".join(names) + " >= 0"
    for name in reversed(names):
        inner = f"{listed}.all({name}, {inner})"
    return inner


def test_a_runaway_selector_or_an_oversized_slice_is_refused_and_other_pods_still_bind(
    scenario: Scenario, scene: DraScene
) -> None:
    node = scene.node("a")
    scenario.start_scheduler()
    # 100 ** 3 iterations: beyond CEL's cost limit, refused at create in a claim and in a class.
    runaway = f"{ATTR}.productName != '' && {_nested(3, 100)}"
    body = _refusal(lambda: scene.claim("runaway", gpus(1, runaway)))
    assert "exceeds cost limit" in body, body
    device_class = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": scene.full("runaway"), "labels": scene.labels},
        "spec": {"selectors": [{"cel": {"expression": runaway}}]},
    }
    body = _refusal(lambda: scene.plane.apply(device_class))
    assert "exceeds cost limit" in body, body
    # 2 ** 4 iterations cost the apiserver's estimate little; our bound on nesting refuses it.
    deep = scene.template("deep", gpus(1, _nested(4, 2)))
    deep_pod = scene.pod("deep", scenario.name, templates={"gpus": deep})
    # A slice of 10,000 devices; a device with a megabyte of attributes.
    slice_: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": scene.full("many"), "labels": scene.labels},
        "spec": {
            "driver": GPU_DRIVER,
            "pool": {"name": scene.full("many"), "generation": 1, "resourceSliceCount": 1},
            "nodeName": node,
            "devices": [{"name": f"gpu-{i}"} for i in range(10_000)],
        },
    }
    body = _refusal(lambda: scene.plane.apply(slice_))
    assert "must have at most 128 items" in body, body
    huge = {"name": "gpu-0", "attributes": {"blob": {"string": "x" * (1 << 20)}}}
    slice_["metadata"]["name"] = slice_["spec"]["pool"]["name"] = scene.full("huge")
    slice_["spec"]["devices"] = [huge]
    body = _refusal(lambda: scene.plane.apply(slice_))
    assert "may not be more than 64 bytes" in body, body

    good = scene.template("good", gpus(2))
    verdict = scene.verdict(deep_pod)
    print(f"deep: {verdict.message}")
    assert not verdict.feasible
    assert "comprehensions nested 4 deep" in verdict.message
    for name in [scene.pod(f"good-{i}", scenario.name, templates={"gpus": good}) for i in range(2)]:
        assert scene.verdict(name).node == node, scenario.schedulers[0].tail()
