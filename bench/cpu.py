"""CPU time a timed drain costs: this process's and the database server's.

Throughput on a shared machine swings with its disk and its neighbours (on the 2-core machine of
docs/benchmarks.md the same drain, run twice in a row, has differed by 1.5x), so the dispatch
comparison also reports what a drain *costs*: the CPU seconds spent per row by this process (the
worker or the raw loop) and by the PostgreSQL server's processes (backends, WAL writer,
checkpointer), read from ``/proc``. It is a second view of the overhead the library's code owns,
not a steadier one on every machine: on a virtual machine whose CPU is shared, a slow run is also
a costly one (waits spin, steal is billed), so its spread is reported like the rate's.

The server's share is known only when the server runs on this machine and ``/proc`` shows its
processes (the embedded server, or one on loopback); otherwise it is ``None`` and only this
process's share is reported.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from bench.stats import Figure

__all__ = [
    "CpuMeter",
    "CpuShares",
    "cpu_figures",
    "machine_busy_seconds",
    "process_seconds",
    "server_seconds",
    "shares_table",
]

_TICK: Final = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PROC: Final = Path("/proc")


def server_seconds() -> float | None:
    """CPU seconds (user + system, children included) used so far by every process named
    ``postgres`` on this machine; ``None`` without a readable ``/proc`` or such a process."""
    return process_seconds("postgres")


def machine_busy_seconds() -> float | None:
    """CPU seconds the cores of this machine have spent running work so far, summed over the
    cores (user, nice, system, irq and softirq time; not idle, iowait or steal); ``None``
    without a readable ``/proc/stat``."""
    try:
        fields = (_PROC / "stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq = (int(f) for f in fields[:7])
    return (user + nice + system + irq + softirq) / _TICK


def process_seconds(name: str) -> float | None:
    """CPU seconds (user + system, children included) used so far by every process named
    ``name`` on this machine; ``None`` without a readable ``/proc`` or such a process."""
    if not _PROC.is_dir():
        return None
    ticks = 0
    found = False
    for stat in _PROC.glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # the process ended meanwhile
            continue
        name_end = text.rfind(")")
        if text[text.find("(") + 1 : name_end] != name:
            continue
        # After the name: state, ppid, ... utime (14th field), stime, cutime, cstime.
        fields = text[name_end + 2 :].split()
        ticks += sum(int(f) for f in fields[11:15])
        found = True
    return ticks / _TICK if found else None


class CpuMeter:
    """CPU seconds between :meth:`start` and :meth:`stop`, per row."""

    def __init__(self) -> None:
        self._client = 0.0
        self._server: float | None = None

    def start(self) -> None:
        self._server = server_seconds()
        self._client = time.process_time()

    def stop(self, rows: int) -> tuple[float, float | None]:
        """(this process's, the server's or ``None``) CPU microseconds per row since start."""
        client = time.process_time() - self._client
        now = server_seconds()
        server = None if now is None or self._server is None else now - self._server
        per_row = 1e6 / max(rows, 1)
        return client * per_row, None if server is None else server * per_row


class CpuShares:
    """CPU seconds between :meth:`start` and :meth:`stop`, per event: this process's, the
    named server processes' (each ``None`` when ``/proc`` shows no such process) and the whole
    machine's; with the wall time, how many cores were busy."""

    def __init__(self, *servers: str) -> None:
        self._servers = servers
        self._start: dict[str, float | None] = {}
        self.last: dict[str, float | None] = {}

    def _read(self) -> dict[str, float | None]:
        seconds = {name: process_seconds(name) for name in self._servers}
        seconds["machine"] = machine_busy_seconds()
        return seconds

    def start(self) -> None:
        self._start = self._read()
        self._start["process"] = time.process_time()

    def stop(self) -> None:
        process = time.process_time()
        end = self._read()
        end["process"] = process
        self.last = {}
        for name, before in self._start.items():
            after = end.get(name)
            self.last[name] = None if before is None or after is None else after - before

    def per_event(self, events: int, seconds: float) -> dict[str, float | None]:
        """The last span's CPU microseconds per event by owner, and ``cores_busy``."""
        shares: dict[str, float | None] = {
            name: None if spent is None else spent * 1e6 / max(events, 1)
            for name, spent in self.last.items()
        }
        machine = self.last.get("machine")
        shares["cores_busy"] = None if machine is None or seconds <= 0 else machine / seconds
        return shares


#: The owners :class:`CpuShares` reports, in the order a table shows them.
_OWNERS: Final = ("process", "postgres", "nats-server", "machine", "cores_busy")


def shares_table(title: str, by_variant: Mapping[str, Any] | None, unit: str) -> list[str]:
    """Markdown lines: one row per variant of ``by_variant`` (owner → :class:`~bench.stats.Figure`
    or ``None``, as the JSON tree holds them before it is written), the CPU per ``unit``."""
    if not by_variant:
        return []
    header = [title, *(f"{o} (µs/{unit})" if o != "cores_busy" else "cores busy" for o in _OWNERS)]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    for variant, owners in by_variant.items():
        cells = ["—" if owners.get(owner) is None else owners[owner].text() for owner in _OWNERS]
        lines.append("| " + " | ".join([variant, *cells]) + " |")
    return [*lines, ""]


def cpu_figures(runs: list[dict[str, float | None]]) -> dict[str, Figure | None]:
    """Per owner (this process, ``postgres``, ``nats-server``, the machine) the CPU microseconds
    per event of a variant's runs, and the cores busy; ``None`` where ``/proc`` could not tell."""
    owners = {owner for run in runs for owner in run}
    figures: dict[str, Figure | None] = {}
    for owner in sorted(owners):
        values = [run.get(owner) for run in runs]
        known = [v for v in values if v is not None]
        unit = "cores" if owner == "cores_busy" else "µs/event"
        figures[owner] = Figure.of(known, unit) if len(known) == len(values) else None
    return figures
