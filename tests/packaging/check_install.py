"""Every install the README documents works from the built wheel (`nox -s package`).

    python tests/packaging/check_install.py DIST_DIR

DIST_DIR holds the built wheel (and sdist). For each `pip install 'leased-outbox[EXTRAS]'` the
README shows, a fresh venv (uv venv) gets ONLY that wheel with those extras, and the `outbox`
command is run there: `--help`, `--version`, `schema sql`, then the commands of the line's extras
(`--help`), and, for a command whose extra the line lacks, the one-line error naming the extra
to install (exit 2). The tutorials' install lines are checked the same way. One more venv with `[all]` imports every module and finds the package data
from site-packages. Every check runs; the failures are listed at the end (exit 1 if any).
Needs `uv` on PATH; reads README.md and pyproject.toml (the extras' nesting) from the repository.
"""

# ruff: noqa: T201 - a script that reports what it checks on stdout
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# An install line: a command line of a code block (not an error message quoted in the text).
README_INSTALL = re.compile(r"^pip install '(leased-outbox\[([a-z0-9_,-]+)\])'", re.MULTILINE)
HINT = "pip install 'leased-outbox["


@dataclass(frozen=True)
class Command:
    """A command behind an extra: available when the venv has any of `extras`."""

    extras: frozenset[str]
    available: tuple[str, ...]  # run with the extra: must exit 0
    missing: tuple[str, ...]  # run without it: exit 2, one stderr line naming the extra


def _cmd(extras: str, available: str, missing: str | None = None) -> Command:
    return Command(
        frozenset(extras.split()), tuple(available.split()), tuple((missing or available).split())
    )


# Where a command would connect, nothing listens: it must stop on the missing extra first.
NO_DB = "--database-url postgresql://outbox@127.0.0.1:9/none"
NATS = "--broker nats://127.0.0.1:9"
KAFKA = "--broker kafka://127.0.0.1:9"
SMTP = "--smtp-url smtp://127.0.0.1:9 --sender noreply@shop.example"

# The table of the commands each extra brings (docs/reference/cli.md). A broker command's
# `--help` needs no broker library; running it with a broker whose extra is missing exits 2.
COMMANDS: tuple[Command, ...] = (
    _cmd("smtp", "worker --help", f"worker --lane email {NO_DB} {SMTP}"),
    _cmd("webhooks", "endpoints --help", "endpoints list"),
    _cmd("webhooks", "endpoints list --help", "endpoints list"),
    _cmd("webhooks", "deliveries --help"),
    _cmd("webhooks", "replay --help"),
    _cmd("webhooks", "worker --help", f"worker --lane webhooks {NO_DB}"),
    _cmd("nats", "relay --help", f"relay {NATS} {NO_DB}"),
    _cmd("kafka", "relay --help", f"relay {KAFKA} {NO_DB}"),
    _cmd("nats", "consume --help", f"consume --channel inapp {NATS} {NO_DB}"),
    _cmd("kafka", "consume --help", f"consume --channel inapp {KAFKA} {NO_DB}"),
    _cmd("nats", "dlq list --help", f"dlq list {NATS}"),
    _cmd("kafka", "dlq list --help", f"dlq list {KAFKA}"),
    _cmd("postgres", "publish --help"),
)

# Modules that need extras `[all]` leaves out (django, demo, embedded).
SKIP_PREFIXES = ("outbox_adapters.django", "outbox_adapters.demo")
SKIP_MODULES = ("outbox_adapters.brokers.embedded", "outbox_adapters.postgres.embedded")

# Run inside the [all] venv: import every module, find the package data; prints one JSON object.
IMPORT_PROBE = r"""
import importlib, importlib.metadata, importlib.resources, json, pkgutil, sys, traceback
skip_prefixes, skip_modules, data_files = json.loads(sys.argv[1])
out = {"imported": [], "failed": {}, "outside": [], "data": {}}
def skipped(name):
    return name in skip_modules or any(name == p or name.startswith(p + ".") for p in skip_prefixes)
def visit(name):
    try:
        module = importlib.import_module(name)
    except Exception:
        out["failed"][name] = traceback.format_exc(limit=3).strip().splitlines()[-1]
        return
    out["imported"].append(name)
    if "site-packages" not in (getattr(module, "__file__", None) or ""):
        out["outside"].append(f"{name}: {getattr(module, '__file__', None)}")
    for info in pkgutil.iter_modules(getattr(module, "__path__", []), name + "."):
        if not skipped(info.name):
            visit(info.name)
for top in ("outbox_core", "outbox_adapters"):
    visit(top)
for package, name in data_files:
    try:
        out["data"][f"{package}/{name}"] = importlib.resources.files(package).joinpath(name).read_bytes().hex()
    except Exception as exc:
        out["data"][f"{package}/{name}"] = None
from outbox_adapters.postgres import schema
import outbox_adapters
dist = importlib.metadata.distribution("leased-outbox")
out["ddl"] = schema.ddl_sql()
out["version"] = [outbox_adapters.__version__, dist.version]
out["license_files"] = [str(f) for f in dist.files or () if "licenses/" in str(f)]
print(json.dumps(out))
"""


@dataclass
class Report:
    failures: list[str]
    passed: int = 0

    def check(self, label: str, ok: bool, detail: str = "") -> None:
        if ok:
            self.passed += 1
            print(f"  ok    {label}")
        else:
            self.failures.append(f"{label}: {detail}")
            print(f"  FAIL  {label}: {detail}")


def readme_installs(pages: list[Path]) -> list[tuple[str, frozenset[str]]]:
    """The `pip install 'leased-outbox[...]'` lines of the README and the tutorials, in order,
    each once (the extras sorted, so `[smtp,postgres]` and `[postgres,smtp]` are one install)."""
    seen: dict[str, frozenset[str]] = {}
    for page in pages:
        for _spec, extras in README_INSTALL.findall(page.read_text(encoding="utf-8")):
            names = frozenset(extras.split(","))
            seen.setdefault(f"leased-outbox[{','.join(sorted(names))}]", names)
    if not seen:
        sys.exit(f"no `pip install 'leased-outbox[...]'` line found in {pages[0]}")
    return list(seen.items())


def expand(extras: frozenset[str], optional: dict[str, list[str]]) -> frozenset[str]:
    """The extras with those they name (`django` brings `postgres` and `cli`)."""
    result: set[str] = set()
    todo = list(extras)
    while todo:
        extra = todo.pop()
        if extra in result:
            continue
        if extra not in optional:
            sys.exit(f"the README names the extra {extra!r}, which pyproject.toml does not define")
        result.add(extra)
        for req in optional[extra]:
            if match := re.fullmatch(r"leased-outbox\[(.+)\]", req):
                todo.extend(match.group(1).split(","))
    return frozenset(result)


def run(argv: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OUTBOX_", "PYTHON", "VIRTUAL_ENV"))
    }
    env |= {"NO_COLOR": "1", "COLUMNS": "100", "PYTHONNOUSERSITE": "1"}
    return subprocess.run(  # noqa: S603 - argv: uv, or the venv's own outbox and python
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def make_venv(wheel: Path, extras: str, where: Path, report: Report, label: str) -> Path | None:
    venv = where / re.sub(r"\W+", "-", extras)
    python = venv / "bin" / "python"
    made = run(["uv", "venv", "-q", "--python", sys.executable, str(venv)], where)
    if made.returncode == 0:
        made = run(
            ["uv", "pip", "install", "-q", "--python", str(python), f"{wheel}[{extras}]"], where
        )
    report.check(f"{label}: install", made.returncode == 0, made.stderr.strip()[-800:])
    return python if made.returncode == 0 else None


def last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1] if lines else ""


def check_outbox(
    venv_python: Path,
    have: frozenset[str],
    *,
    version: str,
    where: Path,
    report: Report,
    label: str,
) -> None:
    outbox = str(venv_python.parent / "outbox")
    if (
        "cli" not in have
    ):  # the `outbox` script is installed, but click is not: one line naming [cli]
        got = run([outbox, "--help"], where)
        lines = got.stderr.strip().splitlines()
        report.check(
            f"{label}: outbox --help without [cli] -> exit 2, one line naming the extra",
            got.returncode == 2 and len(lines) == 1 and HINT in lines[0],
            f"exit {got.returncode}, {len(lines)} stderr line(s), last: {lines[-1] if lines else ''!r}",
        )
        return
    got = run([outbox, "--help"], where)
    report.check(
        f"{label}: outbox --help",
        got.returncode == 0,
        f"exit {got.returncode}: {last_line(got.stderr)}",
    )
    got = run([outbox, "--version"], where)
    report.check(
        f"{label}: outbox --version prints {version}",
        got.returncode == 0 and version in got.stdout,
        f"exit {got.returncode}, stdout {got.stdout.strip()!r}, stderr {last_line(got.stderr)!r}",
    )
    got = run([outbox, "schema", "sql"], where)
    report.check(
        f"{label}: outbox schema sql has CREATE TABLE",
        got.returncode == 0 and "CREATE TABLE" in got.stdout,
        f"exit {got.returncode}: {last_line(got.stderr)}",
    )
    checked: set[tuple[str, ...]] = set()
    for command in COMMANDS:
        if command.extras & have:
            argv = command.available
            got = run([outbox, *argv], where)
            report.check(
                f"{label}: outbox {' '.join(argv)}",
                got.returncode == 0,
                f"exit {got.returncode}: {last_line(got.stderr)}",
            )
            continue
        argv = command.missing
        if argv in checked:
            continue
        checked.add(argv)
        got = run([outbox, *argv], where)
        lines = got.stderr.strip().splitlines()
        report.check(
            f"{label}: outbox {' '.join(argv)} without [{'|'.join(sorted(command.extras))}] -> exit 2, one line naming the extra",
            got.returncode == 2 and len(lines) == 1 and HINT in lines[0],
            f"exit {got.returncode}, {len(lines)} stderr line(s), last: {lines[-1] if lines else ''!r}",
        )


def package_data_files() -> list[tuple[str, str]]:
    """Every non-Python file of the two packages (page.html, page.js, py.typed, feed statics)."""
    files = []
    for path in sorted((ROOT / "src").rglob("*")):
        if (
            path.is_file()
            and path.suffix not in {".py", ".pyc"}
            and "__pycache__" not in path.parts
        ):
            rel = path.relative_to(ROOT / "src")
            files.append((".".join(rel.parent.parts), rel.name))
    return files


def check_all(venv_python: Path, version: str, where: Path, report: Report) -> None:
    label = "[all] venv"
    data_files = package_data_files()
    names = {f"{p}/{n}" for p, n in data_files}
    for required in (
        "outbox_adapters.deadletters/page.html",
        "outbox_adapters.deadletters/page.js",
        "outbox_adapters.portal/page.html",
        "outbox_adapters.portal/page.js",
    ):
        report.check(
            f"{label}: {required} is in the source tree", required in names, "missing from src/"
        )
    arg = json.dumps([SKIP_PREFIXES, SKIP_MODULES, data_files])
    got = run([str(venv_python), "-c", IMPORT_PROBE, arg], where)
    if got.returncode != 0:
        report.check(f"{label}: import probe", False, last_line(got.stderr))
        return
    out = json.loads(got.stdout)
    report.check(
        f"{label}: import {len(out['imported'])} modules",
        not out["failed"],
        json.dumps(out["failed"], indent=2),
    )
    report.check(
        f"{label}: every module from site-packages", not out["outside"], "; ".join(out["outside"])
    )
    for package, name in data_files:
        found = out["data"].get(f"{package}/{name}")
        source = (ROOT / "src" / Path(*package.split(".")) / name).read_bytes().hex()
        report.check(
            f"{label}: package data {package}/{name}",
            found == source,
            "missing" if found is None else "differs from src/",
        )
    schema_sql = run([str(venv_python.parent / "outbox"), "schema", "sql"], where)
    report.check(
        f"{label}: `outbox schema sql` is the installed schema.ddl_sql()",
        schema_sql.returncode == 0
        and schema_sql.stdout == out["ddl"]
        and "CREATE TABLE" in out["ddl"],
        f"exit {schema_sql.returncode}",
    )
    report.check(
        f"{label}: __version__ == metadata version == {version}",
        out["version"] == [version, version],
        str(out["version"]),
    )
    report.check(
        f"{label}: LICENSE in the dist-info", bool(out["license_files"]), "no licenses/ file"
    )


def main() -> int:
    dist = Path(sys.argv[1]).resolve()
    wheels = sorted(dist.glob("leased_outbox-*.whl"))
    if len(wheels) != 1:
        sys.exit(f"expected one leased_outbox wheel in {dist}, found {[w.name for w in wheels]}")
    wheel = wheels[0]
    version = wheel.name.split("-")[1]
    optional = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "optional-dependencies"
    ]
    installs = readme_installs(
        [ROOT / "README.md", *sorted((ROOT / "docs" / "tutorials").glob("*.md"))]
    )
    print(f"wheel {wheel.name}; README installs: {', '.join(spec for spec, _ in installs)}")
    report = Report(failures=[])
    with tempfile.TemporaryDirectory(prefix="outbox-package-") as tmp:
        where = Path(tmp)
        for spec, extras in installs:
            label = f"pip install '{spec}'"
            print(label)
            python = make_venv(wheel, ",".join(sorted(extras)), where, report, label)
            if python is not None:
                check_outbox(
                    python,
                    expand(extras, optional),
                    version=version,
                    where=where,
                    report=report,
                    label=label,
                )
        print("pip install 'leased-outbox[all]'")
        python = make_venv(wheel, "all", where, report, "[all] venv")
        if python is not None:
            have = expand(frozenset({"all"}), optional)
            check_outbox(
                python, have, version=version, where=where, report=report, label="[all] venv"
            )
            check_all(python, version, where, report)
    print(f"\n{report.passed} checks passed, {len(report.failures)} failed")
    for failure in report.failures:
        print(f"  FAILED {failure}")
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
