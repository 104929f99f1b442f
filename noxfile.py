"""Developer and CI tasks. `python3 -m pip install 'nox[uv]'`, then `python3 -m nox -s <session>`."""

from __future__ import annotations

import fnmatch
import re
import shutil
from collections import Counter
from pathlib import Path

import nox

nox.options.default_venv_backend = "uv|virtualenv"
nox.options.sessions = ["tests", "lint", "typecheck"]
nox.options.reuse_existing_virtualenvs = True

PYTHON = "3.11"
#: The project with every extra the suite uses, and the `dev` dependency group (pyproject.toml).
DEV = (".[all,demo,django]", "--group", "dev")
# mutmut workers: the CI runners (and the shared dev machine) have two cores.
MUTMUT_CHILDREN = "2"
MUTMUT_DOC = "docs/testing.md"


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """The whole suite, with branch coverage; 100% is required on the pure core."""
    session.install("-e", *DEV)
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
    session.install("-e", *DEV)
    session.run("pytest", "tests/unit", *session.posargs)


@nox.session(python=PYTHON)
def integration(session: nox.Session) -> None:
    """Integration and contract tests only: real PostgreSQL (OUTBOX_TEST_DSN or embedded), SMTP."""
    session.install("-e", *DEV)
    session.run("pytest", "tests/integration", "tests/contract", *session.posargs)


@nox.session(python=PYTHON)
def mutations(session: nox.Session) -> None:
    """The SQL/worker mutation matrix of RELIABILITY.md: every mutant must turn its test red; then
    the simulator's mutants (tests/simulation/mutants.py), each caught by a seed of the quick run."""
    session.install("-e", *DEV)
    session.run("python", "-m", "tests.mutations.run")
    # The mutants the simulator can express, each caught within the quick run's seeds (ADR 0029).
    session.run("pytest", "-m", "simulation_mutant", "-s", "tests/simulation/test_mutants.py")


@nox.session(python=PYTHON)
def simulate(session: nox.Session) -> None:
    """The deterministic simulation's long run (ADR 0029): `nox -s simulate -- --seeds 100000
    --processes 2`; prints `SIM seeds=... violations=0 ...` and every failing seed's replay
    command. The quick run (500 seeds) is part of `nox -s tests`."""
    session.install("-e", *DEV)
    session.run("python", "-m", "tests.simulation", *(session.posargs or ["--seeds", "10000"]))


@nox.session(python=PYTHON)
def mutmut(session: nox.Session) -> None:
    """mutmut over the pure core, judged by tests/unit: every survivor must be explained.

    `nox -s mutmut` runs every mutant from scratch; `nox -s mutmut -- "outbox_core.classify*"`
    runs (and checks) only the mutants matching the globs. The explained survivors are the
    backticked mutant names between the mutmut-explained markers of docs/testing.md; a survivor
    missing there fails the session.
    """
    session.install("-e", *DEV, "mutmut>=3.8")
    shutil.rmtree("mutants", ignore_errors=True)  # no stale verdicts from an earlier tree
    session.run("mutmut", "run", "--max-children", MUTMUT_CHILDREN, *session.posargs)
    listing = session.run("mutmut", "results", "--all", "true", silent=True)
    verdicts = dict(
        line.strip().rsplit(": ", 1)
        for line in str(listing).splitlines()
        if line.strip().startswith("outbox_core.") and ": " in line
    )
    if session.posargs:
        verdicts = {
            name: verdict
            for name, verdict in verdicts.items()
            if any(fnmatch.fnmatchcase(name, glob) for glob in session.posargs)
        }
    per_module: dict[str, Counter[str]] = {}
    for name, verdict in verdicts.items():
        per_module.setdefault(name.split(".")[1], Counter())[verdict] += 1
    for module, counts in sorted(per_module.items()):
        session.log(f"  {module}: " + ", ".join(f"{n} {v}" for v, n in sorted(counts.items())))
    doc = Path(MUTMUT_DOC).read_text(encoding="utf-8")
    block = doc.partition("<!-- mutmut-explained:begin -->")[2].partition(
        "<!-- mutmut-explained:end -->"
    )[0]
    explained = set(re.findall(r"`(outbox_core\.[^`\s]+__mutmut_\d+)`", block))
    # A timeout is a detection (the mutant hangs the tests); anything else unkilled must be explained.
    unexplained = sorted(
        name
        for name, verdict in verdicts.items()
        if verdict not in {"killed", "timeout"} and name not in explained
    )
    if unexplained:
        session.error(
            f"{len(unexplained)} mutant(s) not killed and not explained in {MUTMUT_DOC}: "
            + ", ".join(unexplained)
            + " (see `mutmut show NAME`)"
        )
    session.log(f"mutmut: {len(verdicts)} mutants, every survivor explained in {MUTMUT_DOC}")


@nox.session(python=PYTHON)
def chaos(session: nox.Session) -> None:
    """The fault tests of RELIABILITY.md in their long versions; prints every figure at the end."""
    session.install("-e", *DEV)
    report = Path(session.create_tmp()) / "chaos-report.txt"
    report.unlink(missing_ok=True)
    env = {"OUTBOX_CHAOS": "full", "OUTBOX_CHAOS_REPORT": str(report)}
    try:
        session.run(
            "python", "-m", "pytest", "-m", "chaos", "-p", "no:randomly", "-s",
            *(session.posargs or ["tests/chaos"]), env=env,
        )  # fmt: skip
        if not session.posargs:
            # Hostile input and the security promises, with >= 2,000 Hypothesis examples each.
            session.run(
                "python", "-m", "pytest", "-s", "tests/security",
                env={**env, "HYPOTHESIS_PROFILE": "chaos"},
            )  # fmt: skip
    finally:
        lines = report.read_text().splitlines() if report.exists() else []
        session.log("chaos figures (RELIABILITY.md):")
        for line in lines or ["(no figures were reported)"]:
            session.log(f"  {line}")


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff (check + format) and the import-linter contracts that keep the core sans-IO."""
    session.install("-e", *DEV)
    session.run("ruff", "check", "src", "tests", "bench", "examples", "docs", "noxfile.py")
    session.run(
        "ruff", "format", "--check", "src", "tests", "bench", "examples", "docs", "noxfile.py"
    )
    session.run("lint-imports")


@nox.session(python=PYTHON)
def typecheck(session: nox.Session) -> None:
    """mypy --strict over both packages, the examples and the tests (pyproject.toml: files, the
    tests.* override)."""
    session.install("-e", *DEV)
    session.run("mypy")


@nox.session(python=PYTHON)
def docs(session: nox.Session) -> None:
    """The documentation site (mkdocs.yml): `mkdocs build --strict`, every warning an error (a
    broken link or anchor, a page left out of the nav, a missing snippet, a stale state diagram),
    into site/ (`nox -s docs -- --site-dir DIR` elsewhere). Nothing is fetched from the internet."""
    session.install("-e", ".[all]", "--group", "docs")
    session.run(
        "mkdocs", "build", "--strict", *(session.posargs or ["--site-dir", "site"]),
        env={"NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip


@nox.session(python=PYTHON)
def demo(session: nox.Session) -> None:
    """`outbox demo`: e-mails through embedded PostgreSQL and a local STARTTLS server, checked."""
    session.install("-e", ".[demo]")
    session.run("outbox", "demo", *session.posargs)


@nox.session(python=PYTHON)
def invoice(session: nox.Session) -> None:
    """The invoice example: an e-mail with a secret link and a PDF, scrubbed once sent, and a
    signed webhook to a local receiver (examples/invoice), checked."""
    session.install("-e", ".[demo]")
    session.run("python", "-m", "examples.invoice", *session.posargs)


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """The side-by-side benchmarks of PERFORMANCE.md (`nox -s bench -- --quick`): bench/results/."""
    session.install("-e", *DEV, "--group", "bench")
    session.run("python", "-m", "bench", *session.posargs)


@nox.session(python=PYTHON)
def signup(session: nox.Session) -> None:
    """The reference app (examples/signup_service) on embedded defaults: http://127.0.0.1:8000/."""
    session.install("-e", ".[demo,feed]", "--group", "example")
    session.run("python", "-m", "examples.signup_service", *session.posargs)


@nox.session(python=PYTHON)
def package(session: nox.Session) -> None:
    """Every install the README documents works from the built wheel: build the wheel and sdist,
    `twine check --strict` both, then tests/packaging/check_install.py (a fresh venv per README
    `pip install 'leased-outbox[...]'` line with only the wheel and those extras; `[all]` imports
    every module and finds the package data)."""
    session.install("twine>=6.1")
    dist = Path(session.create_tmp()) / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    session.run("uv", "build", "--quiet", "--out-dir", str(dist), external=True)
    built = sorted(str(p) for pattern in ("*.whl", "*.tar.gz") for p in dist.glob(pattern))
    session.run("twine", "check", "--strict", *built)
    session.run("python", "tests/packaging/check_install.py", str(dist))


@nox.session(python=PYTHON, reuse_venv=False)
def lowest(session: nox.Session) -> None:
    """The unit tests on the lowest versions pyproject.toml allows for every direct dependency
    (`uv pip install --resolution lowest-direct`): the floors are true. A fresh venv each run."""
    session.install("--resolution", "lowest-direct", "-e", *DEV)
    session.run("pytest", "tests/unit", "-q", "-x", "-p", "no:cacheprovider", *session.posargs)
