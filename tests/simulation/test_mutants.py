"""Proof that the simulator bites: each mutant it can express is caught within the quick run's
seeds (the first seed that catches it, and after how many steps: docs/testing.md, "Simulation").

Marked ``simulation_mutant``: they run in ``nox -s mutations`` (tests/simulation/conftest.py).
"""

from __future__ import annotations

import pytest
from tests.simulation.cli import describe
from tests.simulation.mutants import MUTANTS, apply
from tests.simulation.plan import plan_from_seed
from tests.simulation.run import simulate
from tests.simulation.test_simulation import QUICK_SEEDS


@pytest.mark.simulation_mutant
@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_the_quick_run_catches_the_mutant(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    apply(name, setattr_=monkeypatch.setattr)
    for seed in range(QUICK_SEEDS):
        result = simulate(plan_from_seed(seed))
        if result.violations:
            print(f"\nmutant {name}: caught by seed {seed} at step {result.steps}")  # noqa: T201
            print(describe(result, name))  # noqa: T201
            return
    pytest.fail(f"mutant {name} survived {QUICK_SEEDS} seeds")
