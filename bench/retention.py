"""The claim's latency while ``outbox prune`` deletes the sent history beside it (issue 13 item 4).

One database. Per run: the sent history is loaded (``rows.load_history``: ``history_sizes``' largest
size, created and resolved about 30 days ago), then a plain VACUUM; then two series of timed claims
of 10 due rows (the library's CLAIM statement, one round trip each, each followed by its marks, not
timed: ``history.timed_claims``): ``quiet``, with nothing else running, and ``pruning``, while
:func:`outbox_adapters.postgres.retention.prune_queue` deletes the whole history (cut-off 29 days,
batches of 1,000) on a connection of its own in another thread. Each ``pruning`` series is checked
to have started and ended while the prune ran; the prune's rate (rows/s) is recorded too.

What it shows: the claim walks the partial index of pending rows and the prune deletes resolved
rows, so the claim's p50/p99 should not move (``pruning_vs_quiet_p99`` near 1).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any, Final

import psycopg

from bench import rows
from bench.history import series, size_label, timed_claims, vacuum
from bench.server import fresh_database
from bench.settings import Sizes
from bench.stats import Figure, ratio
from outbox_adapters.postgres.retention import prune_queue
from outbox_adapters.postgres.tables import outbox_message

__all__ = ["measure", "section"]

PRUNE_BATCH: Final = 1_000
#: The history is resolved 30 days ago (rows.LOAD_HISTORY): all of it is older than this.
CUTOFF_AGE: Final = timedelta(days=29)


class _Prune(threading.Thread):
    """``prune_queue`` over the whole history, on its own connection, timed."""

    def __init__(self, dsn: str) -> None:
        super().__init__(daemon=True)
        self.dsn = dsn
        self.removed = 0
        self.seconds = 0.0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                found = conn.execute("SELECT now() - %s::interval", (CUTOFF_AGE,)).fetchone()
                assert found is not None  # noqa: S101 - SELECT answers a row
                started = time.perf_counter()
                self.removed = prune_queue(conn, outbox_message, found[0], batch=PRUNE_BATCH)
                self.seconds = time.perf_counter() - started
        except BaseException as exc:  # noqa: BLE001 - reported by the measuring thread
            self.error = exc


def measure(server_dsn: str, sizes: Sizes, runs: int, log: Callable[[str], None]) -> dict[str, Any]:
    history = max(sizes.history_sizes)
    quiet: dict[str, list[float]] = {"p50": [], "p99": []}
    pruning: dict[str, list[float]] = {"p50": [], "p99": []}
    rates: list[float] = []
    with fresh_database(server_dsn, "retention") as dsn:
        for run in range(runs):
            rows.load_history(dsn, history)
            vacuum(dsn)
            p50, p99 = series(timed_claims(dsn, sizes.history_claims)[0])
            quiet["p50"].append(p50)
            quiet["p99"].append(p99)
            vacuum(dsn)  # the quiet series' dead versions, as before every series
            prune = _Prune(dsn)
            prune.start()
            timings, _ = timed_claims(dsn, sizes.history_claims)
            still_running = prune.is_alive()
            prune.join()
            if prune.error is not None:
                raise prune.error
            if not still_running:
                raise RuntimeError("the prune ended before the claims did: raise the history size")
            if prune.removed != history:
                raise RuntimeError(f"the prune removed {prune.removed} rows, expected {history}")
            p50, p99 = series(timings)
            pruning["p50"].append(p50)
            pruning["p99"].append(p99)
            rates.append(prune.removed / prune.seconds)
            log(
                f"retention run {run + 1}: claim p99 {quiet['p99'][-1]:.2f} ms quiet,"
                f" {p99:.2f} ms while pruning {size_label(history)} rows"
                f" ({rates[-1]:,.0f} rows/s)"
            )
    quiet_p99, pruning_p99 = Figure.of(quiet["p99"], "ms"), Figure.of(pruning["p99"], "ms")
    return {
        "history": history,
        "quiet_p50_ms": Figure.of(quiet["p50"], "ms"),
        "quiet_p99_ms": quiet_p99,
        "pruning_p50_ms": Figure.of(pruning["p50"], "ms"),
        "pruning_p99_ms": pruning_p99,
        "pruning_vs_quiet_p99": ratio(pruning_p99, quiet_p99),
        "prune_rows_per_s": Figure.of(rates, "rows/s"),
        "variant": (
            f"claims of 10 due rows ({sizes.history_claims} per series) beside a sent history of"
            f" {history:,} rows, quiet and while prune_queue deletes that history in batches of"
            f" {PRUNE_BATCH:,} on its own connection"
        ),
    }


def section(r: Mapping[str, Any], cell: Callable[[Mapping[str, Any], str], str]) -> list[str]:
    """The report's markdown for this comparison (``cell`` renders one figure by its path)."""
    body = [
        ["quiet", cell(r, "retention.quiet_p50_ms"), cell(r, "retention.quiet_p99_ms")],
        ["while pruning", cell(r, "retention.pruning_p50_ms"), cell(r, "retention.pruning_p99_ms")],
    ]
    return [
        "## Claim latency while `outbox prune` runs",
        "",
        (
            f"{cell(r, 'retention.variant')}. Pruning / quiet p99:"
            f" **{cell(r, 'retention.pruning_vs_quiet_p99')}**; the prune deleted"
            f" {cell(r, 'retention.prune_rows_per_s')}."
        ),
        "",
        "| series | claim p50, ms | claim p99, ms |",
        "| --- | --- | --- |",
        *[f"| {' | '.join(line)} |" for line in body],
    ]
