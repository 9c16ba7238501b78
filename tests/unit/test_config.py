"""The config file: defaults, strictness, and every problem reported with its path."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.config import Config, ConfigError, RedisSentinel, load_config, parse_config
from scheduler.state.sentinel import sentinel_address, sentinel_credentials

REPO = Path(__file__).resolve().parents[2]


def test_shipped_config_equals_the_defaults() -> None:
    assert load_config(REPO / "configs" / "scheduler.yaml") == Config()
    assert load_config(None) == Config()


def test_to_core_maps_resources_to_vendors() -> None:
    core = parse_config({"resources": {"nvidia": ["example.com/gpu"]}}).to_core()
    assert core.gpu_resources == {"example.com/gpu": "nvidia"}
    assert core.gpu_policy == "topology-aware" and core.node_policy == "binpack"


def test_unknown_field_is_rejected_with_its_path() -> None:
    with pytest.raises(ConfigError) as exc:
        parse_config({"defaults": {"gpuPolicy": "binpack", "nodePolicey": "spread"}})
    assert (
        "defaults.nodePolicey: unknown field (known: gpuPolicy, nodePolicy, sharedGpuPolicy)"
        in str(exc.value)
    )
    with pytest.raises(ConfigError, match=r"run\.lease\.renewSecs: unknown field"):
        parse_config({"run": {"lease": {"renewSecs": 3}}})


def test_every_problem_is_collected_in_one_error() -> None:
    with pytest.raises(ConfigError) as exc:
        parse_config(
            {
                "defaults": {"gpuPolicy": "best"},
                "gang": {"waitTimeoutSeconds": "soon"},
                "run": {"lease": {"durationSeconds": 5, "renewSeconds": 10}},
                "schedulerNmae": "x",
            },
            "config x.yaml",
        )
    text = str(exc.value)
    assert text.startswith("config x.yaml: 4 problems:")
    assert "defaults.gpuPolicy: Invalid enum value 'best'" in text
    assert "gang.waitTimeoutSeconds: Expected `int`, got `str`" in text
    assert "run.lease.renewSeconds: must be above 0 and below durationSeconds" in text
    assert "schedulerNmae: unknown field" in text


def test_a_resource_under_two_vendors_is_rejected() -> None:
    with pytest.raises(
        ConfigError, match=r"resources\.metax: nvidia\.com/gpu is also listed under nvidia"
    ):
        parse_config({"resources": {"nvidia": ["nvidia.com/gpu"], "metax": ["nvidia.com/gpu"]}})
    with pytest.raises(ConfigError, match=r"resources\.amd: unknown vendor"):
        parse_config({"resources": {"amd": ["amd.com/gpu"]}})


def test_yaml_errors_name_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("schedulerName: x\ndefaults: [unclosed\n")
    with pytest.raises(ConfigError, match=r"bad.yaml:\d+: not valid YAML"):
        load_config(path)
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")


def test_with_run_overrides_one_setting() -> None:
    config = Config().with_run(redis_url="redis://127.0.0.1:6379/0")
    assert config.run.redis_url == "redis://127.0.0.1:6379/0"
    assert config.run.bind_concurrency == 64


def test_one_section_reports_each_of_its_problems() -> None:
    with pytest.raises(ConfigError) as exc:
        parse_config({"defaults": {"gpuPolicy": "best", "nodePolicy": 3, "colour": "red"}})
    lines = str(exc.value).splitlines()
    assert lines[0] == "config: 3 problems:"
    assert lines[1].startswith("  - defaults.gpuPolicy: ")
    assert lines[2] == "  - defaults.nodePolicy: Expected `str`, got `int`"
    assert lines[3].startswith("  - defaults.colour: unknown field")


def test_resource_problems_name_the_vendor() -> None:
    with pytest.raises(ConfigError) as exc:
        parse_config({"resources": {"nvidia": "nvidia.com/gpu", "metax": [7]}})
    text = str(exc.value)
    assert "resources.nvidia: Expected `array`, got `str`" in text
    assert "resources.metax[0]: Expected `str`, got `int`" in text


def test_a_section_with_every_field_commented_out_means_defaults(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("schedulerName: mine\ndefaults:\n  # gpuPolicy: spread\ngang:\n")
    config = load_config(path)
    assert config.scheduler_name == "mine"
    assert config.defaults == Config().defaults and config.gang == Config().gang


def test_device_plugin_settings_are_checked_with_their_paths() -> None:
    with pytest.raises(ConfigError) as exc:
        parse_config(
            {
                "agent": {
                    "devicePlugin": {
                        "resourceName": "example.com/gpu",
                        "cdiKind": "nvidia.com/gpu=all",
                        "socketName": "a/b.sock",
                        "identifyTimeoutSeconds": 0,
                    }
                }
            }
        )
    message = str(exc.value)
    assert "4 problems" in message
    assert (
        "agent.devicePlugin.resourceName: 'example.com/gpu' is not in resources.nvidia, "
        "so the scheduler would not count it" in message
    )
    assert "agent.devicePlugin.cdiKind: 'nvidia.com/gpu=all' is not a CDI kind" in message
    assert "agent.devicePlugin.socketName: must be a file name inside pluginDir" in message
    assert "agent.devicePlugin.identifyTimeoutSeconds: must be above 0" in message


def test_device_plugin_mode_and_injection_are_closed_sets() -> None:
    with pytest.raises(ConfigError) as exc:
        parse_config({"agent": {"devicePlugin": {"mode": "lenient"}}})
    assert "agent.devicePlugin.mode: Invalid enum value 'lenient'" in str(exc.value)


def test_device_plugin_resource_follows_the_resources_section() -> None:
    config = parse_config(
        {
            "resources": {"nvidia": ["aliyun.com/gpu"]},
            "agent": {"devicePlugin": {"resourceName": "aliyun.com/gpu"}},
        }
    )
    assert config.agent.device_plugin.resource_name == "aliyun.com/gpu"
    assert config.agent.device_plugin.node_selector == {"topo-scheduler.io/device-plugin": "true"}
    # A config that never touches the device plugin is not judged by its default resource.
    assert parse_config({"resources": {"nvidia": ["aliyun.com/gpu"]}, "agent": {}}).agent


# ---- run.redisSentinel (issue 22) -----------------------------------------------------------


def test_sentinels_are_read_with_their_password_from_the_url() -> None:
    config = parse_config(
        {
            "run": {
                "redisUrl": "redis://:s3cret@ignored/2",
                "redisSentinel": {"masterName": "topo", "addresses": ["r-0.r:26379", "[::1]:1"]},
            }
        }
    )
    assert config.run.redis_sentinel.addresses == ("r-0.r:26379", "[::1]:1")
    assert sentinel_credentials(config.run.redis_url) == (None, "s3cret", 2)
    assert sentinel_credentials("") == (None, None, 0)
    assert sentinel_address("[::1]:26379") == ("::1", 26379)


def test_sentinel_problems_are_named_by_their_field() -> None:
    with pytest.raises(ConfigError) as exc:
        parse_config(
            {
                "run": {
                    "redisUrl": "unix:///run/redis.sock",
                    "redisSentinel": {"masterName": "topo", "addresses": ["a:1", "b", "c:0"]},
                }
            }
        )
    text = str(exc.value)
    assert "run.redisSentinel.addresses[1]: 'b' is not host:port" in text
    assert "run.redisSentinel.addresses[2]: 'c:0': the port must be a number" in text
    assert "run.redisUrl: with redisSentinel set, the URL only carries the password" in text
    with pytest.raises(ConfigError, match="addresses: must list at least one Sentinel"):
        parse_config({"run": {"redisSentinel": {"masterName": "topo"}}})
    with pytest.raises(ConfigError, match="masterName: must be set when addresses are given"):
        parse_config({"run": {"redisSentinel": {"addresses": ["a:1"]}}})


def test_the_environment_overrides_the_sentinels_and_is_checked_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from scheduler.service.app import settings_from

    monkeypatch.setenv("TOPO_SCHEDULER_REDIS_SENTINEL_MASTER_NAME", "topo")
    monkeypatch.setenv("TOPO_SCHEDULER_REDIS_SENTINEL_ADDRESSES", "a:26379, b:26379,")
    run = settings_from(Config(), None, None).run
    assert run.redis_sentinel == RedisSentinel(master_name="topo", addresses=("a:26379", "b:26379"))
    monkeypatch.setenv("TOPO_SCHEDULER_REDIS_SENTINEL_ADDRESSES", "a")
    with pytest.raises(ConfigError, match=r"addresses\[0\]: 'a' is not host:port"):
        settings_from(Config(), None, None)


def test_topology_section_reaches_the_core_and_bad_levels_are_named() -> None:
    from scheduler.core.model.objects import TopologyLevel

    config = parse_config(
        {
            "topology": {
                "levels": [{"nodeLabel": "x/block", "alias": "block"}, {"nodeLabel": "x/rack"}],
                "acceleratorLabel": "",
                "compactGangs": False,
                "packDomains": False,
                "spillBrokenFirst": False,
                "yieldToRequired": False,
            }
        }
    )
    core = config.to_core().topology
    assert core.levels == (TopologyLevel("x/block", "block"), TopologyLevel("x/rack"))
    assert core.accelerator_label == "" and not core.compact_gangs and not core.pack_domains
    assert not core.spill_broken_first and not core.yield_to_required
    with pytest.raises(ConfigError) as exc:
        parse_config(
            {
                "topology": {
                    "levels": [
                        {"nodeLabel": "kubernetes.io/hostname"},
                        {"nodeLabel": "x/rack", "alias": "nvlink"},
                        {"nodeLabel": "x/rack"},
                    ]
                }
            }
        )
    text = str(exc.value)
    assert "topology.levels[0].nodeLabel: hostname is always the last level, implied" in text
    assert "topology.levels[2]: x/rack names two levels" in text
    assert "topology.levels: nvlink is a built-in level's name" in text
