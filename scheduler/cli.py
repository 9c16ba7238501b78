"""The `topo-scheduler` command. One subcommand a module; this file only parses and dispatches."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def _simulate(args: argparse.Namespace) -> int:
    from scheduler.config import ConfigError, load_config
    from scheduler.sim.loader import LoadError, load_files
    from scheduler.sim.render import to_json, to_table
    from scheduler.sim.simulate import simulate

    try:
        config = load_config(args.config)
        loaded = load_files(args.files)
    except (ConfigError, LoadError) as exc:
        print(f"topo-scheduler simulate: {exc}", file=sys.stderr)
        return 2
    result = simulate(loaded, config)
    if args.output == "json":
        sys.stdout.write(to_json(result).decode() + "\n")
    else:
        sys.stdout.write(to_table(result))
    return 0


def _run(args: argparse.Namespace) -> int:
    from scheduler.service import heap

    heap.pause()  # until the watches have synced (heap.py)

    import asyncio

    import uvloop

    from scheduler.config import ConfigError, load_config
    from scheduler.config.logs import configure_logging
    from scheduler.service.app import run, settings_from

    try:
        config = settings_from(
            load_config(args.config),
            args.redis_url,
            args.http_address,
            debug_from_anywhere=args.debug_from_anywhere,
        )
    except ConfigError as exc:
        print(f"topo-scheduler run: {exc}", file=sys.stderr)
        return 2
    configure_logging(args.log_level)
    # uvloop: the scheduler is mostly I/O (watch streams, Bindings, Redis); libuv's loop and
    # transports cost a fraction of asyncio's own per event (bench-live, docs/benchmarks.md).
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(run(config, args.kubeconfig))


def _agent(args: argparse.Namespace) -> int:
    from scheduler.agent.main import run

    return run(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="topo-scheduler",
        description="A topology-aware secondary Kubernetes scheduler for GPU clusters.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sim = sub.add_parser(
        "simulate",
        help="schedule the pods in Kubernetes manifests offline, with the live scheduler's core",
        description="Read v1 Node and Pod objects (YAML or JSON, multi-document or kind: List) "
        "and show where the pending pods of this scheduler would go.",
    )
    sim.add_argument("--config", help="scheduler config file (default: built-in defaults)")
    sim.add_argument("-o", "--output", choices=["table", "json"], default="table")
    sim.add_argument("files", nargs="+", metavar="FILE")
    sim.set_defaults(func=_simulate)

    run = sub.add_parser(
        "run",
        help="run the scheduler against a cluster",
        description="Watch the cluster and bind the pending pods of this scheduler with "
        "device-assignment annotations. Without a Redis URL the state is kept in memory and "
        "only one replica may run.",
    )
    run.add_argument("--config", help="scheduler config file (default: built-in defaults)")
    run.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster configuration)")
    run.add_argument(
        "--redis-url",
        help="Redis for shared state and leader election, e.g. redis://host:6379/0 "
        "(default: run.redisUrl, or $TOPO_SCHEDULER_REDIS_URL)",
    )
    run.add_argument(
        "--http-address",
        help="host:port for /healthz, /readyz, /metrics (port 0 picks a free port; "
        "default: run.httpAddress, or $TOPO_SCHEDULER_HTTP_ADDRESS)",
    )
    run.add_argument(
        "--debug-from-anywhere",
        action="store_true",
        help="answer /debug/pods/... from any client, not only this machine's loopback "
        "(default: run.debugFromAnywhere)",
    )
    run.add_argument("--log-level", default="info", choices=["debug", "info", "warning"])
    run.set_defaults(func=_run)

    from scheduler.agent.arguments import add_arguments

    agent = sub.add_parser(
        "agent",
        help="publish a node's GPUs and topology in its topo-scheduler.io/gpus annotation",
        description="Discover this node's GPUs and their topology (nvidia-smi topo -m, NVML, or "
        "a static topology per node model from the config's agent section) and patch the node's "
        "topo-scheduler.io/gpus annotation when it changes. With --print, show the annotation "
        "and touch no cluster.",
    )
    add_arguments(agent)
    agent.set_defaults(func=_agent)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
