# ruff: noqa: T201 - a command-line report: printing is its job
"""Run every mutant of the matrix and show that the test named for it turns red.

    python -m tests.mutations.run               (nox -s mutations)
    python -m tests.mutations.run --overlaps    (every matrix test against every mutant)

First the matrix's tests run unmutated (all must pass); then each mutant runs against its named
test. A mutant *survives* if its named test stays green: the run then fails. With ``--overlaps``
each mutant runs against every matrix test instead, and the other tests that also went red are
listed, so overlaps are visible (about five times as long).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.mutations.matrix import MUTANTS


def _run(tests: list[str], mutant: str | None) -> dict[str, str]:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        command = [
            sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
            "tests.mutations.plugin", f"--mutant-report={report}", "-x" if mutant is None else "-q",
            *([f"--mutant={mutant}"] if mutant else []), *tests,
        ]  # fmt: skip
        subprocess.run(command, check=False, capture_output=True)  # noqa: S603 - our own pytest
        return json.loads(report.read_text()) if report.exists() else {}


def main(argv: list[str]) -> int:
    overlaps = "--overlaps" in argv
    tests = sorted({mutant.test for mutant in MUTANTS})
    baseline = _run(tests, None)
    broken = [test for test in tests if baseline.get(test) != "passed"]
    if broken:
        print("the matrix's tests must pass before mutating; failing:", *broken, sep="\n  ")
        return 1
    rows = []
    survivors = 0
    for mutant in MUTANTS:
        outcomes = _run(tests if overlaps else [mutant.test], mutant.name)
        killed = outcomes.get(mutant.test) == "failed"
        survivors += not killed
        also = [
            t.split("::")[-1] for t in tests if t != mutant.test and outcomes.get(t) == "failed"
        ]
        rows.append((mutant, killed, also))
    extra = " other matrix tests red |" if overlaps else ""
    print(f"| mechanism | mutation | test that must fail | result |{extra}")
    print("| --- | --- | --- | --- |" + (" --- |" if overlaps else ""))
    for mutant, killed, also in rows:
        verdict = "killed" if killed else "SURVIVED"
        shown = f" {', '.join(also) or '-'} |" if overlaps else ""
        print(
            f"| {mutant.mechanism} | {mutant.mutation} | {mutant.test.split('::')[-1]} |"
            f" {verdict} |{shown}"
        )
    print(f"\n{len(MUTANTS) - survivors} of {len(MUTANTS)} mutants killed")
    return 1 if survivors else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
