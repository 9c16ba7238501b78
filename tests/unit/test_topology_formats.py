"""The topology annotations of each source, read into one TopologyAsk (issue 21): one module per
format (core/formats/topology_*)."""

from __future__ import annotations

import pytest

from scheduler.core.formats import FormatError, topology_kai, topology_kueue, topology_ours
from scheduler.core.formats.topology_ask import TopologyAsk
from tests.builders import MakePod


def pod(**annotations: str) -> MakePod:
    p = MakePod().Name("w-0").Req(4)
    for key, value in annotations.items():
        p = p.Annotation(key, value)
    return p


def test_ours_reads_required_preferred_and_slices() -> None:
    ask = topology_ours.read(
        pod(
            **{
                "topo-scheduler.io/topology-required": "block",
                "topo-scheduler.io/topology-preferred": "rack",
                "topo-scheduler.io/topology-slice-required": "nvlink",
                "topo-scheduler.io/topology-slice-size": "4",
            }
        ).Obj()
    )
    assert ask == TopologyAsk(
        source="topo-scheduler.io",
        says="annotation topo-scheduler.io/topology-required=block, annotation "
        "topo-scheduler.io/topology-preferred=rack, annotation "
        "topo-scheduler.io/topology-slice-required=nvlink, annotation "
        "topo-scheduler.io/topology-slice-size=4",
        required="block",
        preferred="rack",
        slice_level="nvlink",
        slice_size=4,
    )
    assert topology_ours.read(MakePod().Name("plain").Obj()) is None


@pytest.mark.parametrize(
    ("annotations", "error"),
    [
        ({"topo-scheduler.io/topology-slice-size": "4"}, "needs annotation"),
        ({"topo-scheduler.io/topology-slice-required": "rack"}, "needs annotation"),
        ({"topo-scheduler.io/topology-required": " "}, "empty"),
    ],
)
def test_ours_malformed_names_the_annotation(annotations: dict[str, str], error: str) -> None:
    with pytest.raises(FormatError, match=error):
        topology_ours.read(pod(**annotations).Obj())


def test_kueue_slices_and_its_chosen_domain() -> None:
    annotations = {
        "kueue.x-k8s.io/podset-required-topology": "x/block",
        "kueue.x-k8s.io/podset-slice-required-topology": "x/rack",
        "kueue.x-k8s.io/podset-slice-size": "2",
    }
    ask = topology_kueue.read(pod(**annotations).Obj())
    assert ask is not None and (ask.required, ask.slice_level, ask.slice_size) == (
        "x/block",
        "x/rack",
        2,
    )
    assert not ask.pinned
    # Kueue's ungater merged the domain into the nodeSelector and removed its gate: final.
    chosen = pod(**annotations).NodeSelector("x/block", "b1").Obj()
    assert topology_kueue.read(chosen).pinned  # type: ignore[union-attr]
    # Still gated: not chosen yet (the selector is the user's).
    gated = pod(**annotations).NodeSelector("x/block", "b1").Gate("kueue.x-k8s.io/topology").Obj()
    assert not topology_kueue.read(gated).pinned  # type: ignore[union-attr]


def test_kai_needs_its_topology_and_reads_segments() -> None:
    ask = topology_kai.read(
        pod(
            **{
                "kai.scheduler/topology": "gb200",
                "kai.scheduler/topology-preferred-placement": "clique",
                "kai.scheduler/segment-size": "8",
                "kai.scheduler/segment-topology-required-placement": "clique",
            }
        ).Obj()
    )
    assert ask is not None
    assert (ask.topology, ask.preferred, ask.slice_level, ask.slice_size) == (
        "gb200",
        "clique",
        "clique",
        8,
    )
    with pytest.raises(FormatError, match=r"kai\.scheduler/topology is missing"):
        topology_kai.read(pod(**{"kai.scheduler/topology-required-placement": "rack"}).Obj())
