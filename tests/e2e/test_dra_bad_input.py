"""Bad DRA input on the plane (issue 29's "Bad input"): a pod whose claim cannot be allocated for
a reason of its own waits with a clear reason, and the scheduler goes on scheduling other pods.

- a selector that fails at run time (an attribute no device has: CEL's "no such key"); a
  selector with a syntax error never gets that far, the apiserver refuses the claim (checked);
- a claim naming a DeviceClass that does not exist.
"""

from __future__ import annotations

import urllib.error

import pytest

from scheduler.testing.dradriver import GPU_DRIVER

from .dra import DraScene
from .dra_shapes import claim, exactly, gpus
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
