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
from pathlib import Path
from typing import Final

__all__ = ["CpuMeter", "server_seconds"]

_TICK: Final = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PROC: Final = Path("/proc")


def server_seconds() -> float | None:
    """CPU seconds (user + system, children included) used so far by every process named
    ``postgres`` on this machine; ``None`` without a readable ``/proc`` or such a process."""
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
        if text[text.find("(") + 1 : name_end] != "postgres":
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
