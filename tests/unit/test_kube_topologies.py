"""Kueue's and KAI's Topology objects and Volcano's networkTopology, decoded (issue 21)."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.core.model.objects import NetworkTopologyInput, TopologyInput, TopologyLevel
from scheduler.kube.podgroups import convert_pod_group
from scheduler.kube.topologies import TopologyObjectError, convert_topology


def topology(api_version: str, levels: list[dict[str, str]], name: str = "t") -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": "Topology",
        "metadata": {"name": name},
        "spec": {"levels": levels},
    }


@pytest.mark.parametrize("version", ["v1beta1", "v1beta2"])
def test_kueue_topology_of_either_version(version: str) -> None:
    obj = topology(
        f"kueue.x-k8s.io/{version}",
        [{"nodeLabel": "block"}, {"nodeLabel": "kubernetes.io/hostname"}],
    )
    assert convert_topology(obj) == TopologyInput(
        "Kueue", "t", (TopologyLevel("block"), TopologyLevel("kubernetes.io/hostname"))
    )


def test_kai_topology_keeps_aliases() -> None:
    obj = topology("kai.scheduler/v1alpha1", [{"nodeLabel": "x/rack", "alias": "rack"}])
    assert convert_topology(obj).levels == (TopologyLevel("x/rack", "rack"),)


@pytest.mark.parametrize(
    ("levels", "field"),
    [
        ([], "spec.levels: 0 levels"),
        ([{"nodeLabel": "kubernetes.io/hostname"}, {"nodeLabel": "r"}], "spec.levels[0].nodeLabel"),
        ([{"nodeLabel": "r"}, {"nodeLabel": "r"}], "spec.levels[1]: r names two levels"),
        ([{"alias": "x"}], "spec.levels[0].nodeLabel: missing"),
    ],
)
def test_unusable_topologies_name_the_field(levels: list[dict[str, str]], field: str) -> None:
    with pytest.raises(TopologyObjectError) as exc:
        convert_topology(topology("kai.scheduler/v1alpha1", levels, name="gb"))
    assert str(exc.value).startswith("KAI Topology gb: ")
    assert field in str(exc.value)


def test_volcano_network_topology_is_read() -> None:
    group = convert_pod_group(
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": "job", "namespace": "default"},
            "spec": {"minMember": 2, "networkTopology": {"mode": "soft", "highestTierAllowed": 2}},
        }
    )
    assert group.network_topology == NetworkTopologyInput("soft", 2, None)
