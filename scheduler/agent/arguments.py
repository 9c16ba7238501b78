"""The agent's command-line flags (``topo-scheduler agent``), apart from the agent itself: the
command line is built for every subcommand, and ``run`` should not import the agent's discovery,
device plugin and gRPC to print its help or parse its flags."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--node",
        default=None,
        help="the node to publish (default: $NODE_NAME; with --print only names the default "
        "GPU UUIDs)",
    )
    parser.add_argument(
        "--config", help="config file; its agent section (default: built-in defaults)"
    )
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster configuration)")
    parser.add_argument(
        "--topo-file",
        help="read this saved `nvidia-smi topo -m` output instead of running nvidia-smi",
    )
    parser.add_argument(
        "--query-file",
        help="with --topo-file: a saved `nvidia-smi --query-gpu=index,uuid,memory.total,"
        "pci.bus_id --format=csv,noheader,nounits` output (without it: indices only)",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--print",
        action="store_true",
        help="print the annotation value it would write and exit; touches no cluster",
    )
    mode.add_argument("--once", action="store_true", help="publish once and exit")
    parser.add_argument(
        "--device-plugin",
        action="store_true",
        help="also serve the kubelet device plugin (agent.devicePlugin in the config) on nodes "
        "whose labels match agent.devicePlugin.nodeSelector",
    )
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning"])
