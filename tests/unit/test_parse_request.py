"""parse_request keeps what the containers ask for by their spec: pods that share it share the
parse, and everything read from the pod itself (policies, gang, the pod named in an error) stays
its own."""

from __future__ import annotations

import pytest

from scheduler.core.model.names import GPU_POLICY_ANNOTATION
from scheduler.core.model.objects import ContainerInput, PodInput
from scheduler.core.resources.memo import Memo
from scheduler.core.resources.requests import AskMemo, RequestError, parse_request
from scheduler.core.settings import CoreSettings

SETTINGS = CoreSettings()


def _pod(name: str, gpus: str, **kw: object) -> PodInput:
    container = ContainerInput("main", limits={"nvidia.com/gpu": gpus})
    return PodInput("default", name, containers=(container,), **kw)  # type: ignore[arg-type]


def test_pods_of_one_spec_keep_their_own_policy_and_gang() -> None:
    asks: AskMemo = Memo(8)
    a = _pod("a", "2")
    b = _pod(
        "b",
        "2",
        annotations={GPU_POLICY_ANNOTATION: "spread"},
        labels={"gpu-topology": "job", "gpu-topology-replica": "2"},
    )
    ra, rb = parse_request(a, SETTINGS, asks), parse_request(b, SETTINGS, asks)
    assert len(asks) == 1  # one spec, one parse
    assert (ra.gpus, ra.resources, ra.containers) == (2, (("nvidia.com/gpu", 2),), (("main", 2),))
    assert (rb.gpus, rb.resources, rb.containers) == (ra.gpus, ra.resources, ra.containers)
    assert (ra.gpu_policy, ra.gang) == ("topology-aware", None)
    assert rb.gpu_policy == "spread"
    assert rb.gang is not None and rb.gang.minimum == 2
    assert parse_request(_pod("c", "4"), SETTINGS, asks).gpus == 4  # another spec, another answer
    assert len(asks) == 2


def test_a_malformed_spec_names_each_pod_that_has_it() -> None:
    asks: AskMemo = Memo(8)
    for name in ("x", "y"):
        with pytest.raises(RequestError, match=f"pod default/{name}: containers\\[main\\]"):
            parse_request(_pod(name, "two"), SETTINGS, asks)
    assert len(asks) == 0  # an error is never kept
