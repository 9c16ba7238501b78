"""CDI spec check: the plugin refuses to register GPUs the container runtime could not resolve."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from scheduler.agent.plugin.cdi import CdiSpecError, check_specs, device_names
from scheduler.agent.plugin.server import DevicePluginServer, Injection, PluginConfig
from scheduler.testing.kubelet import Kubelet
from tests.plugin_node import RESOURCE, UUIDS, Annotations, dgx1_inventory, write_cdi_spec


def test_device_names_from_yaml_and_json_specs(tmp_path: Path) -> None:
    write_cdi_spec(tmp_path / "etc", UUIDS[:2])
    run = tmp_path / "run"
    run.mkdir()
    (run / "other.yaml").write_text(
        "cdiVersion: 0.6.0\nkind: vendor.com/fpga\ndevices:\n- name: f0\n"
    )
    (run / "broken.yaml").write_text("kind: [unclosed\n")
    (run / "notes.txt").write_text("not a spec")
    names, problems = device_names([tmp_path / "etc", run, tmp_path / "absent"])
    assert names == {
        "nvidia.com/gpu=0",
        "nvidia.com/gpu=1",
        f"nvidia.com/gpu={UUIDS[0]}",
        f"nvidia.com/gpu={UUIDS[1]}",
        "nvidia.com/gpu=all",
        "vendor.com/fpga=f0",
    }
    assert len(problems) == 1 and "broken.yaml" in problems[0]


def test_check_names_every_missing_gpu(tmp_path: Path) -> None:
    write_cdi_spec(tmp_path, UUIDS[:6])
    check_specs([tmp_path], "nvidia.com/gpu", UUIDS[:6])
    with pytest.raises(CdiSpecError) as err:
        check_specs([tmp_path], "nvidia.com/gpu", UUIDS)
    message = str(err.value)
    assert f"nvidia.com/gpu={UUIDS[6]}, nvidia.com/gpu={UUIDS[7]}" in message
    assert UUIDS[5] not in message


@pytest.mark.parametrize("injection", [Injection.CDI, Injection.ENV])
async def test_plugin_refuses_to_register_without_specs_unless_env(injection: Injection) -> None:
    root = Path(tempfile.mkdtemp(prefix="tk-", dir="/tmp"))
    write_cdi_spec(root / "cdi", UUIDS[:7])  # one GPU has no spec entry
    kubelet = Kubelet(root, RESOURCE)
    config = PluginConfig(
        plugin_dir=kubelet.plugin_dir,
        pod_resources_socket=kubelet.pod_resources_socket,
        injection=injection,
        cdi_spec_dirs=(root / "cdi",),
        watch_interval=0.05,
    )
    plugin = DevicePluginServer(config, dgx1_inventory(), Annotations().get_pod)
    try:
        await kubelet.start()
        if injection is Injection.CDI:
            with pytest.raises(CdiSpecError, match=UUIDS[7]):
                await plugin.start()
            assert kubelet.registrations == []
            assert not plugin.socket_path.exists()
        else:
            await plugin.start()
            assert len(kubelet.registrations) == 1
    finally:
        await plugin.stop()
        await kubelet.stop()
        shutil.rmtree(root, ignore_errors=True)
