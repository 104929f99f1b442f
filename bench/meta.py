"""What the figures were measured on: machine, Python, loop, server, tree, and when."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Final

__all__ = ["machine", "packages", "tree"]

_PACKAGES: Final = (
    "leased-outbox",
    "psycopg",
    "psycopg-binary",
    "psycopg-pool",
    "aiosmtplib",
    "aiosmtpd",
    "uvloop",
    "pgqueuer",
    "asyncpg",
)


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def machine() -> dict[str, Any]:
    cpu_model = next(
        (
            line.split(":", 1)[1].strip()
            for line in _read("/proc/cpuinfo").splitlines()
            if line.startswith("model name")
        ),
        platform.processor() or "unknown",
    )
    mem_kb = next(
        (
            int(line.split()[1])
            for line in _read("/proc/meminfo").splitlines()
            if line.startswith("MemTotal:")
        ),
        0,
    )
    return {
        "cores": os.cpu_count(),
        "memory_gib": round(mem_kb / 1024 / 1024, 1),
        "cpu_model": cpu_model,
        "kernel": platform.release(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "python": f"{platform.python_implementation()} {sys.version.split()[0]}",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def packages() -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for name in _PACKAGES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    return found


def tree(root: Path) -> dict[str, Any]:
    """The git commit measured, and whether the working tree had changes on top of it."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(  # noqa: S603 - fixed arguments, no shell
                ["git", *args],  # noqa: S607 - git from PATH, as a developer runs it
                cwd=root,
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    status = git("status", "--porcelain", "--untracked-files=no")
    return {
        "git_commit": git("rev-parse", "HEAD"),
        "dirty": bool(status) if status is not None else None,
    }
