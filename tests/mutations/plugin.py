"""pytest plugin: ``-p tests.mutations.plugin --mutant NAME`` runs the suite against one mutant."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--mutant", default=None, help="name of the mutant to apply (matrix.py)")
    parser.addoption("--mutant-report", default=None, help="write test outcomes here as JSON")


def pytest_configure(config: pytest.Config) -> None:
    name = config.getoption("--mutant")
    if name:
        from tests.mutations import matrix  # noqa: PLC0415 - only when a mutant is asked for

        matrix.apply(name)
    config.stash[_OUTCOMES] = {}


_OUTCOMES = pytest.StashKey[dict[str, str]]()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    outcomes = _current_config.stash[_OUTCOMES] if _current_config else {}
    if report.when == "call" or report.outcome == "failed":
        previous = outcomes.get(report.nodeid)
        if previous != "failed":
            outcomes[report.nodeid] = report.outcome


_current_config: pytest.Config | None = None


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    global _current_config  # noqa: PLW0603 - pytest hooks share state through the config
    _current_config = session.config


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = session.config.getoption("--mutant-report")
    if path:
        Path(path).write_text(json.dumps(session.config.stash[_OUTCOMES], indent=2))
