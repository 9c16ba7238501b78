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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
