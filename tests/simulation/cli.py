# ruff: noqa: T201 - a command-line report: printing is its job
"""Run many seeds, or replay one: ``python -m tests.simulation`` (``nox -s simulate``).

    python -m tests.simulation --seeds 100000 --processes 2     the long run; prints the SIM line
    python -m tests.simulation --seed 4711                      replay one seed, with its details
    python -m tests.simulation --plan '{"seed":1,"faults":[...]}'   replay a plan Hypothesis found
    python -m tests.simulation --seeds 500 --mutant mark-attached   the same under a mutant

Exits 1 if any run broke an invariant; each such run is printed with its replay command.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from collections.abc import Iterable, Sequence

import attrs
from tests.simulation.plan import Plan, plan_from_seed
from tests.simulation.run import simulate
from tests.simulation.world import Result

__all__ = ["Totals", "main", "replay_command", "run_seeds"]

_FIGURES = ("steps", "crashes", "cancels", "pauses", "outages", "deliveries", "duplicates")


def replay_command(plan: Plan, mutant: str | None = None) -> str:
    """The one line that replays ``plan`` exactly."""
    extra = f" --mutant {mutant}" if mutant else ""
    if plan == plan_from_seed(plan.seed):
        return f"python -m tests.simulation --seed {plan.seed}{extra}"
    return f"python -m tests.simulation --plan '{plan.to_json()}'{extra}"


@attrs.define
class Totals:
    seeds: int = 0
    steps: int = 0
    crashes: int = 0
    cancels: int = 0
    pauses: int = 0
    outages: int = 0
    deliveries: int = 0
    duplicates: int = 0
    simulated_seconds: float = 0.0
    failures: list[Result] = attrs.Factory(list)

    def add(self, result: Result) -> None:
        self.seeds += 1
        for name in _FIGURES:
            setattr(self, name, getattr(self, name) + getattr(result, name))
        self.simulated_seconds += result.simulated_seconds
        if result.violations:
            self.failures.append(result)

    def line(self, wall: float) -> str:
        return (
            f"SIM seeds={self.seeds} steps={self.steps} crashes={self.crashes}"
            f" cancels={self.cancels} pauses={self.pauses} outages={self.outages}"
            f" deliveries={self.deliveries} duplicates={self.duplicates}"
            f" violations={len(self.failures)} simulated={self.simulated_seconds / 3600:.1f}h"
            f" wall={wall:.1f}s ({self.seeds / max(wall, 1e-9):.0f} seeds/s)"
        )


def _one(seed: int) -> Result:
    return simulate(plan_from_seed(seed))


def _apply_mutant(name: str | None) -> None:
    if name:
        from tests.simulation.mutants import apply  # noqa: PLC0415 - only when asked

        apply(name)


def run_seeds(seeds: Iterable[int], *, processes: int = 1, mutant: str | None = None) -> Totals:
    """Simulate every seed (in ``processes`` worker processes) and add up what was seen."""
    totals = Totals()
    if processes <= 1:
        _apply_mutant(mutant)
        for seed in seeds:
            totals.add(_one(seed))
        return totals
    with multiprocessing.get_context("spawn").Pool(
        processes, initializer=_apply_mutant, initargs=(mutant,)
    ) as pool:
        for result in pool.imap(_one, seeds, chunksize=64):
            totals.add(result)
    return totals


def describe(result: Result, mutant: str | None = None) -> str:
    lines = [
        f"seed {result.plan.seed}: {result.shape}",
        f"  faults: {', '.join(f.describe() for f in result.plan.faults) or 'none'}",
        (
            f"  steps={result.steps} crashes={result.crashes} cancels={result.cancels}"
            f" pauses={result.pauses} outages={result.outages} deliveries={result.deliveries}"
            f" duplicates={result.duplicates} unfinished={result.unfinished}"
            f" simulated={result.simulated_seconds:.0f}s trace={result.trace_hash}"
        ),
        *(f"  VIOLATION {v}" for v in result.violations[:10]),
        f"  replay: {replay_command(result.plan, mutant)}",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.simulation", description=__doc__)
    parser.add_argument("--seeds", type=int, default=500, help="how many seeds (default 500)")
    parser.add_argument("--first", type=int, default=0, help="the first seed (default 0)")
    parser.add_argument("--processes", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument("--seed", type=int, help="replay this one seed")
    parser.add_argument("--plan", help="replay this plan (JSON, as a failure prints it)")
    parser.add_argument("--mutant", help="run under this mutant (tests/simulation/mutants.py)")
    args = parser.parse_args(argv)
    if args.seed is not None or args.plan:
        _apply_mutant(args.mutant)
        plan = Plan.from_json(args.plan) if args.plan else plan_from_seed(args.seed)
        result = simulate(plan)
        print(describe(result, args.mutant))
        return 1 if result.violations else 0
    started = time.perf_counter()
    seeds = range(args.first, args.first + args.seeds)
    totals = run_seeds(seeds, processes=args.processes, mutant=args.mutant)
    for failure in totals.failures[:20]:
        print(describe(failure, args.mutant))
    print(totals.line(time.perf_counter() - started))
    return 1 if totals.failures else 0


if __name__ == "__main__":
    sys.exit(main())
