"""``make soak-sim``: the simulation for a chosen time or number of steps, over many seeds.

    python -m tests.sim.soak [--seconds S] [--steps N] [--seed FIRST] [--mutant NAME|all]
                             [--redis] [--steps-per-run K] [--runs-per-seed R]

Each seed is one Hypothesis search (``--runs-per-seed`` runs of up to ``--steps-per-run``
steps); a violation is shrunk to its shortest schedule and printed with its seed. The end prints
steps per second, invariants checked, the seeds run and every violation. ``--seed S --runs-per-
seed R`` replays a seed exactly (memory store; run with the same PYTHONHASHSEED, which the make
target fixes). ``--mutant`` applies one mutant (mutants.py) or each in turn, and says which the
simulation found.

Exit status: 0 when no violation was found (with --mutant: when every mutant was found).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Iterator

import structlog
from hypothesis import HealthCheck, Phase, settings
from hypothesis.internal.conjecture import engine
from hypothesis.stateful import run_state_machine_as_test

from . import mutants, timelines
from .machine import SimMachine


def quiet_logs() -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    logging.disable(logging.CRITICAL)


def search(seed: int, runs: int, steps: int, shrink: bool = True) -> str | None:
    """One seed's search; the violation with its timeline (shrunk unless ``shrink`` is
    False: a quick yes or no), or None."""
    machine = type(f"SimMachine_{seed}", (SimMachine,), {"_hypothesis_internal_use_seed": seed})
    config = settings(
        max_examples=runs,
        stateful_step_count=steps,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.generate, Phase.shrink] if shrink else [Phase.generate],
        print_blob=False,
    )
    try:
        run_state_machine_as_test(machine, settings=config)
    except AssertionError as exc:
        return str(exc)
    return None


def seeds(first: int) -> Iterator[int]:
    seed = first
    while True:
        yield seed
        seed += 1


def soak(args: argparse.Namespace) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    ran: list[int] = []
    start = time.perf_counter()
    stats = SimMachine.stats
    for seed in seeds(args.seed):
        if args.steps and stats.steps >= args.steps:
            break
        if args.seconds and time.perf_counter() - start >= args.seconds:
            break
        ran.append(seed)
        violation = search(seed, args.runs_per_seed, args.steps_per_run)
        if violation is not None:
            found.append((seed, violation))
            print(f"\n=== seed {seed}: VIOLATION\n{violation}\n", flush=True)
            if args.stop_at_first:
                break
    elapsed = time.perf_counter() - start
    print(
        f"\n{stats.steps} steps in {elapsed:.1f}s ({stats.steps / max(elapsed, 1e-9):.0f} steps/s),"
        f" {stats.runs} runs, {stats.simulated_s / 3600:.1f} simulated hours,"
        f" {stats.checks} invariant checks; seeds {ran[0]}..{ran[-1]} ({len(ran)});"
        f" {len(found)} with a violation" + (f": {[s for s, _ in found]}" if found else ""),
        flush=True,
    )
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="soak-sim", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=0.0)
    parser.add_argument("--steps", type=int, default=0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--runs-per-seed", type=int, default=10)
    parser.add_argument("--steps-per-run", type=int, default=60)
    parser.add_argument("--mutant", default="")
    parser.add_argument("--stop-at-first", action="store_true")
    parser.add_argument("--redis", action="store_true")
    parser.add_argument("--without", default="", help="rules left out, comma-separated")
    parser.add_argument("--shrink-seconds", type=int, default=60)
    parser.add_argument(
        "--timelines", action="store_true", help="replay the hand-written timelines first"
    )
    args = parser.parse_args(argv)
    if not args.seconds and not args.steps:
        args.seconds = 60.0
    quiet_logs()
    # Hypothesis' own cap on the time one shrink may take (300 s; no public setting): a soak
    # wants the next seed sooner, and a minute gets these schedules to a handful of steps.
    engine.MAX_SHRINKING_SECONDS = args.shrink_seconds
    SimMachine.disabled = frozenset(filter(None, args.without.split(",")))
    if args.redis:
        from .redisbackend import redis_backend

        with redis_backend() as backend:
            SimMachine.backend = backend
            return _main(args)
    return _main(args)


def _main(args: argparse.Namespace) -> int:
    if args.timelines:
        for name in timelines.TIMELINES:
            violation = timelines.replay(name)
            print(
                f"\n=== timeline {name}: " + (f"VIOLATION\n{violation}" if violation else "holds")
            )
    if not args.mutant:
        return 1 if soak(args) else 0
    names = list(mutants.MUTANTS) if args.mutant == "all" else [args.mutant]
    missed = [name for name in names if not hunt(name, args)]
    print(f"\nmutants found: {len(names) - len(missed)}/{len(names)}; missed: {missed or 'none'}")
    return 1 if missed else 0


def hunt(name: str, args: argparse.Namespace) -> bool:
    """Search with the mutant ``name`` applied, seed after seed, until a seed's search fails
    with it and passes without it (the same seed draws the same schedules until the first
    failure: a failure that main shares is one of main's own bugs, not the mutant's)."""
    mutant = mutants.MUTANTS[name]
    print(f"\n##### mutant {name}: {mutant.bug}", flush=True)
    SimMachine.disabled = mutant.disabled()
    start = time.perf_counter()
    stats = SimMachine.stats
    steps_before = stats.steps
    for seed in seeds(args.seed):
        if time.perf_counter() - start >= args.seconds:
            break
        with mutants.applied(name):
            violation = search(seed, args.runs_per_seed, args.steps_per_run, shrink=False)
        if violation is None:
            continue
        if search(seed, args.runs_per_seed, args.steps_per_run, shrink=False) is not None:
            print(f"seed {seed}: a violation main has too; searching on", flush=True)
            continue
        with mutants.applied(name):  # again, shrinking it to its shortest schedule
            violation = search(seed, args.runs_per_seed, args.steps_per_run) or violation
        elapsed = time.perf_counter() - start
        print(f"FOUND at seed {seed} after {elapsed:.1f}s:\n{violation}\n", flush=True)
        return True
    steps = stats.steps - steps_before
    print(f"MISSED: {steps} steps in {time.perf_counter() - start:.1f}s found nothing", flush=True)
    return False


if __name__ == "__main__":
    sys.exit(main())
