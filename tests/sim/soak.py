"""``make soak-sim``: the simulation for a chosen time or number of steps, over many seeds.

    python -m tests.sim.soak [--seconds S] [--steps N] [--seed FIRST] [--jobs J]
                             [--runs-per-seed R] [--steps-per-run K] [--without RULE,...]
                             [--mutant NAME|all] [--timelines] [--redis] [--stop-at-first]
                             [--ci [--mutant-seconds M]]

Each seed is one Hypothesis search (``--runs-per-seed`` runs of up to ``--steps-per-run``
steps) in a process of its own, forked from this one before it ran anything: a seed's run
depends on nothing but the seed and the options (the live scheduler iterates sets of objects
hashed by address, so a run in a process with another history could take another turn).
``--jobs`` seeds run at once. A violation is shrunk to its shortest schedule and printed with
its seed. The end prints steps per second, invariants checked, the seeds run and every
violation. ``--seed S --steps 1`` replays seed S (with the same options; the make target fixes
PYTHONHASHSEED). ``--mutant`` applies one mutant (mutants.py) or each in turn, and says which
the simulation found.

Exit status: 0 when no violation was found (with --mutant: when every mutant was found).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import logging
import multiprocessing
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.pool import AsyncResult, Pool

import structlog
from hypothesis import HealthCheck, Phase, settings
from hypothesis.internal.conjecture import engine
from hypothesis.stateful import run_state_machine_as_test

from . import mutants, timelines
from .machine import SimMachine, Stats, machine_for


def quiet_logs() -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    logging.disable(logging.CRITICAL)


def search(seed: int, runs: int, steps: int, shrink: bool = True) -> str | None:
    """One seed's search in this process; the violation with its timeline (shrunk unless
    ``shrink`` is False: a quick yes or no), or None."""
    base = machine_for(SimMachine.disabled)
    machine = type(f"SimMachine_{seed}", (base,), {"_hypothesis_internal_use_seed": seed})
    config = settings(
        max_examples=runs,
        stateful_step_count=steps,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.generate, Phase.shrink] if shrink else [Phase.generate],
        print_blob=False,
        report_multiple_bugs=False,  # one violation, shrunk (the next seed finds the others)
    )
    try:
        run_state_machine_as_test(machine, settings=config)
    except AssertionError as exc:
        return str(exc)
    return None


@dataclass(frozen=True)
class Job:
    seed: int
    runs: int
    steps: int
    disabled: frozenset[str]
    mutant: str = ""
    shrink: bool = True


def run_job(job: Job) -> tuple[str | None, Stats]:
    """A job in a fresh child process: its violation (or None) and its counts."""
    SimMachine.disabled = job.disabled
    with mutants.applied(job.mutant) if job.mutant else contextlib.nullcontext():
        violation = search(job.seed, job.runs, job.steps, job.shrink)
    return violation, SimMachine.stats


class Runner:
    """Jobs in forked children, one fresh child per job, ``jobs`` at a time; the counts of
    every finished job summed."""

    def __init__(self, jobs: int) -> None:
        self.pool: Pool = multiprocessing.get_context("fork").Pool(jobs, maxtasksperchild=1)
        self.jobs = jobs
        self.stats = Stats()

    def submit(self, job: Job) -> AsyncResult[tuple[str | None, Stats]]:
        return self.pool.apply_async(run_job, (job,))

    def result(self, pending: AsyncResult[tuple[str | None, Stats]]) -> str | None:
        violation, stats = pending.get()
        self.stats.steps += stats.steps
        self.stats.checks += stats.checks
        self.stats.runs += stats.runs
        self.stats.simulated_s += stats.simulated_s
        return violation

    def run(self, job: Job) -> str | None:
        return self.result(self.submit(job))

    def close(self) -> None:
        self.pool.terminate()
        self.pool.join()


def seeds(first: int) -> Iterator[int]:
    seed = first
    while True:
        yield seed
        seed += 1


def soak(args: argparse.Namespace, runner: Runner) -> list[tuple[int, str]]:
    """Seeds from ``--seed`` on, ``--jobs`` at a time, until the budget is spent."""
    found: list[tuple[int, str]] = []
    ran: list[int] = []
    start = time.perf_counter()
    stats = runner.stats
    disabled = frozenset(filter(None, args.without.split(",")))
    in_flight: list[tuple[int, AsyncResult[tuple[str | None, Stats]]]] = []
    next_seed = seeds(args.seed)

    def spent() -> bool:
        if args.steps and stats.steps >= args.steps:
            return True
        return bool(args.seconds) and time.perf_counter() - start >= args.seconds

    while True:
        while len(in_flight) < runner.jobs and not spent() and not (found and args.stop_at_first):
            seed = next(next_seed)
            # make sim does not shrink (its budget): the seed replays, and soak-sim shrinks.
            job = Job(seed, args.runs_per_seed, args.steps_per_run, disabled, shrink=not args.ci)
            in_flight.append((seed, runner.submit(job)))
        if not in_flight:
            break
        seed, pending = in_flight.pop(0)
        violation = runner.result(pending)
        ran.append(seed)
        if violation is not None:
            found.append((seed, violation))
            print(f"\n=== seed {seed}: VIOLATION\n{violation}\n", flush=True)
    elapsed = time.perf_counter() - start
    print(
        f"\n{stats.steps} steps in {elapsed:.1f}s ({stats.steps / max(elapsed, 1e-9):.0f} steps/s,"
        f" {runner.jobs} jobs), {stats.runs} runs, {stats.simulated_s / 3600:.1f} simulated hours,"
        f" {stats.checks} invariant checks; seeds {min(ran, default=0)}..{max(ran, default=0)}"
        f" ({len(ran)}); {len(found)} with a violation"
        + (f": {sorted(s for s, _ in found)}" if found else ""),
        flush=True,
    )
    return found


def hunt(name: str, args: argparse.Namespace, runner: Runner, first: int | None = None) -> bool:
    """Search with the mutant ``name`` applied, seed after seed from ``first`` (default
    ``--seed``), until a seed's search fails with it and passes without it (a seed draws the
    same schedules until its first failure: a failure that main shares is one of main's own
    bugs, not the mutant's). ``--ci`` does not shrink what it found."""
    mutant = mutants.MUTANTS[name]
    print(f"\n##### mutant {name}: {mutant.bug}", flush=True)
    disabled = mutant.disabled()
    start = time.perf_counter()
    steps_before = runner.stats.steps
    for seed in seeds(args.seed if first is None else first):
        if time.perf_counter() - start >= args.seconds:
            break
        quick = Job(seed, args.runs_per_seed, args.steps_per_run, disabled, name, shrink=False)
        violation = runner.run(quick)
        if violation is None:
            continue
        if runner.run(Job(seed, quick.runs, quick.steps, disabled, shrink=False)) is not None:
            print(f"seed {seed}: a violation main has too; searching on", flush=True)
            continue
        if not args.ci:  # again, shrunk to its shortest schedule
            violation = runner.run(Job(seed, quick.runs, quick.steps, disabled, name)) or violation
        elapsed = time.perf_counter() - start
        print(f"FOUND at seed {seed} after {elapsed:.1f}s:\n{violation}\n", flush=True)
        return True
    steps = runner.stats.steps - steps_before
    print(f"MISSED: {steps} steps in {time.perf_counter() - start:.1f}s found nothing", flush=True)
    return False


def ci(args: argparse.Namespace, runner: Runner) -> int:
    """``make test``'s run (``make sim``): ``--steps`` steps over seeds from ``--seed`` (the
    rules of ``--without`` left out), then every mutant checked, all at once on ``--jobs``: its
    hand-written timeline (timelines.py) must fail with it and hold without it, or the search
    from its known seed (``Mutant.seed``) must fail with it where the same seed passes without
    it (a mutant its seed misses, after a change moved it, is hunted from the next seeds for
    ``--mutant-seconds``). Fails on any violation and on any mutant missed; prints one summary
    with each mutant's seconds (of one core)."""
    start = time.perf_counter()
    found = soak(args, runner)
    soaked = runner.stats.steps
    soak_s = time.perf_counter() - start
    began = time.perf_counter()
    checks: dict[str, tuple[AsyncResult[Check], AsyncResult[Check]]] = {}
    for name, mutant in mutants.MUTANTS.items():
        if mutant.timeline:
            checks[name] = (
                runner.pool.apply_async(timeline_check, (name, True)),
                runner.pool.apply_async(timeline_check, (name, False)),
            )
        elif mutant.seed is not None:
            job = Job(
                mutant.seed,
                args.runs_per_seed,
                args.steps_per_run,
                mutant.disabled(),
                shrink=False,  # a yes or no: the seed replays
            )
            checks[name] = (
                runner.pool.apply_async(seed_check, (dataclasses.replace(job, mutant=name),)),
                runner.pool.apply_async(seed_check, (job,)),
            )
    took: dict[str, str] = {}
    missed: list[str] = []
    hunt_args = argparse.Namespace(**{**vars(args), "seconds": args.mutant_seconds})
    for name, (with_it, without_it) in checks.items():
        mutant = mutants.MUTANTS[name]
        (failed, with_s), (main_failed, main_s) = with_it.get(), without_it.get()
        how = f"timeline {mutant.timeline}" if mutant.timeline else f"seed {mutant.seed}"
        if failed and not main_failed:
            took[name] = f"{how}, {with_s + main_s:.1f}s"
            continue
        print(f"mutant {name}: {how} no longer finds it; searching on", flush=True)
        hunted = time.perf_counter()
        if mutant.seed is not None and hunt(name, hunt_args, runner, first=mutant.seed + 1):
            took[name] = f"searched, {time.perf_counter() - hunted:.1f}s"
        else:
            missed.append(name)
    unreached = [n for n, m in mutants.MUTANTS.items() if not m.timeline and m.seed is None]
    print("\n=== make sim summary", flush=True)
    print(
        f"soak: {soaked} steps in {soak_s:.1f}s ({soaked / max(soak_s, 1e-9):.0f} steps/s,"
        f" {runner.jobs} jobs), {runner.stats.checks} invariant checks in all;"
        f" left out: {args.without or 'nothing'}; violations: {len(found)}"
    )
    for name, how in took.items():
        print(f"mutant {name}: found ({how})")
    print(
        f"mutants: {len(took)}/{len(mutants.MUTANTS)} found in"
        f" {time.perf_counter() - began:.1f}s; missed: {missed or 'none'};"
        f" not reached yet (no seed, no timeline: mutants.py says why): {unreached or 'none'};"
        f" {time.perf_counter() - start:.1f}s in all",
        flush=True,
    )
    return 1 if found or missed else 0


# What one mutant check says: whether the run failed, and its seconds.
Check = tuple[bool, float]


def seed_check(job: Job) -> Check:
    """One seed's search (unshrunk), in a fresh child."""
    began = time.perf_counter()
    violation, _ = run_job(job)
    return violation is not None, time.perf_counter() - began


def timeline_check(name: str, with_mutant: bool) -> Check:
    """The mutant's timeline replayed, with the mutant or without it."""
    began = time.perf_counter()
    timeline = mutants.MUTANTS[name].timeline
    with mutants.applied(name) if with_mutant else contextlib.nullcontext():
        failed = timelines.replay(timeline) is not None
    return failed, time.perf_counter() - began


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="soak-sim", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=0.0)
    parser.add_argument("--steps", type=int, default=0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--runs-per-seed", type=int, default=10)
    parser.add_argument("--steps-per-run", type=int, default=60)
    parser.add_argument("--mutant", default="")
    parser.add_argument("--stop-at-first", action="store_true")
    parser.add_argument("--redis", action="store_true")
    parser.add_argument("--without", default="", help="rules left out, comma-separated")
    parser.add_argument("--shrink-seconds", type=int, default=60)
    parser.add_argument("--mutant-seconds", type=float, default=10.0, help="--ci: per mutant")
    parser.add_argument(
        "--ci",
        action="store_true",
        help="make test's run: --steps on --jobs, then every mutant from its known seed",
    )
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
    if args.redis:
        from .redisbackend import redis_backend

        with redis_backend() as backend:
            SimMachine.backend = backend
            args.jobs = 1  # one redis-server, one run at a time
            return _main(args)
    return _main(args)


def _main(args: argparse.Namespace) -> int:
    runner = Runner(args.jobs)
    try:
        if args.timelines:
            for name in timelines.TIMELINES:
                violation = runner.pool.apply(timelines.replay, (name,))
                verdict = f"VIOLATION\n{violation}" if violation else "holds"
                print(f"\n=== timeline {name}: {verdict}", flush=True)
        if args.ci:
            return ci(args, runner)
        if not args.mutant:
            return 1 if soak(args, runner) else 0
        names = list(mutants.MUTANTS) if args.mutant == "all" else [args.mutant]
        missed = [name for name in names if not hunt(name, args, runner)]
    finally:
        runner.close()
    print(f"\nmutants found: {len(names) - len(missed)}/{len(names)}; missed: {missed or 'none'}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
