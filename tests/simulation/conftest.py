"""The simulator's tests. Those marked ``simulation_mutant`` (each runs seeds until its mutant is
caught) run in ``nox -s mutations`` (``pytest -m simulation_mutant tests/simulation``), not in the
default suite."""

from __future__ import annotations

import pytest

MUTANT_MARK = "simulation_mutant"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if MUTANT_MARK in (config.getoption("-m") or ""):
        return
    skip = pytest.mark.skip(reason=f"runs in nox -s mutations (pytest -m {MUTANT_MARK})")
    for item in items:
        if item.get_closest_marker(MUTANT_MARK):
            item.add_marker(skip)
