"""Developer and CI tasks. `python3 -m pip install 'nox[uv]'`, then `python3 -m nox -s <session>`."""

from __future__ import annotations

import nox

nox.options.default_venv_backend = "uv|virtualenv"
nox.options.sessions = ["tests", "lint", "typecheck"]
nox.options.reuse_existing_virtualenvs = True

PYTHON = "3.11"
DEV = ".[dev]"


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """The whole suite, with branch coverage; 100% is required on the pure core."""
    session.install("-e", DEV)
    session.run("coverage", "erase")
    session.run(
        "coverage",
        "run",
        "-m",
        "pytest",
        *(session.posargs or ["tests"]),
        env={"HYPOTHESIS_PROFILE": session.env.get("HYPOTHESIS_PROFILE", "ci")},
    )
    session.run("coverage", "report", "--include=*/outbox_core/*", "--fail-under=100")


@nox.session(python=PYTHON)
def unit(session: nox.Session) -> None:
    """The unit tests only (core, no sockets): the fast loop while working on the core."""
    session.install("-e", DEV)
    session.run("pytest", "tests/unit", *session.posargs)


@nox.session(python=PYTHON)
def integration(session: nox.Session) -> None:
    """Integration and contract tests only: real PostgreSQL (OUTBOX_TEST_DSN or embedded), SMTP."""
    session.install("-e", DEV)
    session.run("pytest", "tests/integration", "tests/contract", *session.posargs)


@nox.session(python=PYTHON)
def mutations(session: nox.Session) -> None:
    """The SQL/worker mutation matrix of RELIABILITY.md: every mutant must turn its test red."""
    session.install("-e", DEV)
    session.run("python", "-m", "tests.mutations.run")


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff (check + format) and the import-linter contracts that keep the core sans-IO."""
    session.install("-e", DEV)
    session.run("ruff", "check", "src", "tests", "noxfile.py")
    session.run("ruff", "format", "--check", "src", "tests", "noxfile.py")
    session.run("lint-imports")


@nox.session(python=PYTHON)
def typecheck(session: nox.Session) -> None:
    """mypy --strict over both packages."""
    session.install("-e", DEV)
    session.run("mypy")


@nox.session(python=PYTHON)
def demo(session: nox.Session) -> None:
    """`outbox demo`: e-mails through embedded PostgreSQL and a local STARTTLS server, checked."""
    session.install("-e", ".[demo]")
    session.run("outbox", "demo", *session.posargs)
