"""`topo-scheduler agent`: the node agent's command line.

Modes:
- ``--print``: probe once (saved outputs with ``--topo-file``/``--query-file``, else this
  machine's nvidia-smi/NVML) and print the annotation value it would write, touching no cluster.
  People use it to check a machine; tests use it on captured outputs.
- otherwise: publish the node's topology, every ``agent.pollSeconds`` (a DaemonSet, one pod per
  GPU node), or once with ``--once``. The node is ``--node``, else ``$NODE_NAME`` (the downward
  API's ``spec.nodeName`` in deploy/'s DaemonSet). Without ``--kubeconfig`` the in-cluster
  configuration is used. SIGTERM or SIGINT stops it after the poll in progress.
- ``--device-plugin`` (with the above): also serve the kubelet device plugin for the probed GPUs
  on nodes that match ``agent.devicePlugin.nodeSelector`` (plugin/host.py), until stopped.

Exit status: 0 done; 1 ``--once`` whose poll did not publish (probe failed, node missing,
apiserver error); 2 a bad config, bad flags, or (``--print``) a failed probe, with the reason on
stderr naming file and line.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys

import msgspec
import structlog

from scheduler.config import ConfigError, load_config
from scheduler.config.agent import AgentConfig
from scheduler.config.logs import configure_logging
from scheduler.core.formats.gpus import encode
from scheduler.core.resources.inventory import (
    InventoryError,
    check_annotation,
    strip_inventory_prefix,
)
from scheduler.kube.client import api_client

from .nvidia import ProbeError
from .probe import Prober

PROG = "topo-scheduler agent"


def _fail(message: str) -> int:
    print(f"{PROG}: {message}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    if args.query_file and not args.topo_file:
        return _fail("--query-file needs --topo-file")
    if args.device_plugin and (args.print or args.once):
        return _fail("--device-plugin serves until stopped: not with --print or --once")
    try:
        config = load_config(args.config).agent
    except ConfigError as exc:
        return _fail(str(exc))
    if args.topo_file:
        # Flags name both saved outputs: a query file from the config must not pair with them.
        nvidia = msgspec.structs.replace(
            config.nvidia, topo_file=args.topo_file, query_file=args.query_file or ""
        )
        config = msgspec.structs.replace(config, nvidia=nvidia)
    node = args.node or os.environ.get("NODE_NAME", "")
    if args.print:
        return _print(config, node or "node")
    if not node:
        return _fail("--node is required (or set NODE_NAME)")
    configure_logging(args.log_level)
    return asyncio.run(_serve(config, node, args.kubeconfig, args.once, args.device_plugin))


def _print(config: AgentConfig, node: str) -> int:
    # Stdout carries the annotation alone (people pipe it into kubectl annotate); the probe's
    # log lines, such as NVML falling back to nvidia-smi, go to stderr.
    structlog.configure(
        processors=[structlog.processors.add_log_level, structlog.processors.JSONRenderer()],
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
    )
    # Static models are matched by node labels, which need the cluster: --print probes NVIDIA.
    try:
        probed = asyncio.run(Prober(config).nvidia())
    except ProbeError as exc:
        return _fail(str(exc))
    value = encode(probed.annotation)
    try:
        check_annotation(value, node)
    except InventoryError as exc:  # the scheduler would reject it
        return _fail(f"{probed.source}: {strip_inventory_prefix(str(exc), node)}")
    sys.stdout.write(value + "\n")
    return 0


async def _serve(
    config: AgentConfig, node: str, kubeconfig: str | None, once: bool, device_plugin: bool
) -> int:
    from .kube import AgentApi
    from .loop import Agent, Outcome

    client = await api_client(kubeconfig)
    host = None
    try:
        api = AgentApi(client)
        if device_plugin:  # gRPC is imported only by the agents that serve it
            from .plugin.host import PluginHost

            host = PluginHost(config.device_plugin, api.pod_annotations, api.publish_allocated)
        agent = Agent(
            node,
            Prober(config),
            api,
            poll_seconds=config.poll_seconds,
            event_repeat_seconds=config.event_repeat_seconds,
            plugin=host,
        )
        if once:
            outcome = await agent.poll()
            return 0 if outcome in (Outcome.PATCHED, Outcome.UNCHANGED) else 1
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await agent.run(stop)
        return 0
    finally:
        if host is not None:  # lets the allocation reports in flight land first
            await host.stop()
        await client.close()
