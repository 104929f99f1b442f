"""The claim's latency while ``outbox prune`` deletes the sent history beside it (issue 13 item 4).

Per run, three series of timed claims of 10 due rows (the library's CLAIM, one round trip each,
each followed by its marks, not timed: ``history.timed_claims``), each in a database of its own
holding a sent history of ``history_sizes``' largest size, after a plain VACUUM:

- ``quiet``: nothing else running;
- ``pruning``: for as long as :func:`outbox_adapters.postgres.retention.prune_queue` deletes that
  history (cut-off 29 days, batches of 1,000) on a connection of its own in another thread;
- ``pruning_paused``: the same with :data:`PAUSE` between batches (``outbox prune --pause``).

The pending rows are loaded before the prune starts; a prune series needs at least
:data:`MIN_CLAIMS` claims to report and must delete the whole history; its rate is recorded too.

What it shows: the claim walks the partial index of pending rows and the prune deletes resolved
rows, so nothing in the claim's plan changes; what the prune costs the claim is the disk and the
CPU it takes (2 cores here), which the pause gives back.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any, Final

import psycopg

from bench import rows
from bench.history import CLAIM_BATCH, series, timed_claims, vacuum
from bench.server import fresh_database
from bench.settings import Sizes
from bench.stats import Figure, ratio
from outbox_adapters.postgres.retention import prune_queue
from outbox_adapters.postgres.tables import outbox_message

__all__ = ["measure", "section"]

PRUNE_BATCH: Final = 1_000
#: The throttled series' pause between prune batches (``outbox prune --pause``).
PAUSE: Final = 0.05
#: A prune series must see at least this many claims to report percentiles.
MIN_CLAIMS: Final = 50
#: The history is resolved 30 days ago (rows.LOAD_HISTORY): all of it is older than this.
CUTOFF_AGE: Final = timedelta(days=29)


class _Prune(threading.Thread):
    """``prune_queue`` over the whole history, on its own connection, timed."""

    def __init__(self, dsn: str, pause: float) -> None:
        super().__init__(daemon=True)
        self.dsn = dsn
        self.pause = pause
        self.removed = 0
        self.seconds = 0.0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                found = conn.execute("SELECT now() - %s::interval", (CUTOFF_AGE,)).fetchone()
                assert found is not None  # noqa: S101 - SELECT answers a row
                started = time.perf_counter()
                self.removed = prune_queue(
                    conn, outbox_message, found[0], batch=PRUNE_BATCH, pause=self.pause
                )
                self.seconds = time.perf_counter() - started
        except BaseException as exc:  # noqa: BLE001 - reported by the measuring thread
            self.error = exc


#: The series: (name, pause between prune batches in seconds; None: no prune at all).
SERIES: Final = (("quiet", None), ("pruning", 0.0), ("pruning_paused", PAUSE))


def _series(
    dsn: str, claims: int, pause: float | None, history: int
) -> tuple[float, float, float | None]:
    """(claim p50, claim p99, prune rows/s) of one series: claims alone, or claims for as long as
    a prune with ``pause`` runs beside them (at least :data:`MIN_CLAIMS` of them)."""
    vacuum(dsn)  # the previous series' dead versions, as before every series
    if pause is None:
        p50, p99 = series(timed_claims(dsn, claims)[0])
        return p50, p99, None
    most = claims * 20
    rows.load_pending_only(dsn, most * CLAIM_BATCH)  # before the prune starts: it is fast
    prune = _Prune(dsn, pause)
    prune.start()
    timings, _ = timed_claims(dsn, most, while_=prune.is_alive, preload=False)
    prune.join()
    if prune.error is not None:
        raise prune.error
    if prune.removed != history:
        raise RuntimeError(f"the prune removed {prune.removed} rows, expected {history}")
    if len(timings) < MIN_CLAIMS:
        raise RuntimeError(f"only {len(timings)} claims ran during the prune: raise the history")
    p50, p99 = series(timings)
    return p50, p99, prune.removed / prune.seconds


def measure(server_dsn: str, sizes: Sizes, runs: int, log: Callable[[str], None]) -> dict[str, Any]:
    history = max(sizes.history_sizes)
    found: dict[str, dict[str, list[float]]] = {
        name: {"p50": [], "p99": [], "rate": []} for name, _ in SERIES
    }
    for run in range(runs):
        for name, pause in SERIES:
            # A database per series, its history written first: ids grow with time, as they do
            # in production, so the prune's walk stops only where the young rows begin.
            with fresh_database(server_dsn, "retention") as dsn:
                rows.load_history(dsn, history)
                p50, p99, rate = _series(dsn, sizes.history_claims, pause, history)
            found[name]["p50"].append(p50)
            found[name]["p99"].append(p99)
            if rate is not None:
                found[name]["rate"].append(rate)
            log(
                f"retention run {run + 1} {name}: claim p50 {p50:.2f} ms, p99 {p99:.2f} ms"
                + (f" (prune {rate:,.0f} rows/s)" if rate else "")
            )
    figures: dict[str, Any] = {"history": history}
    for name, _ in SERIES:
        figures[f"{name}_p50_ms"] = Figure.of(found[name]["p50"], "ms")
        figures[f"{name}_p99_ms"] = Figure.of(found[name]["p99"], "ms")
        if found[name]["rate"]:
            figures[f"{name}_rows_per_s"] = Figure.of(found[name]["rate"], "rows/s")
    for name in ("pruning", "pruning_paused"):
        figures[f"{name}_vs_quiet_p99"] = ratio(figures[f"{name}_p99_ms"], figures["quiet_p99_ms"])
        figures[f"{name}_vs_quiet_p50"] = ratio(figures[f"{name}_p50_ms"], figures["quiet_p50_ms"])
    figures["variant"] = (
        f"claims of 10 due rows beside a sent history of {history:,} rows: quiet"
        f" ({sizes.history_claims} claims), then for as long as prune_queue deletes that history"
        f" in batches of {PRUNE_BATCH:,} on its own connection, without a pause and with"
        f" {PAUSE * 1000:g} ms between batches"
    )
    return figures


def section(r: Mapping[str, Any], cell: Callable[[Mapping[str, Any], str], str]) -> list[str]:
    """The report's markdown for this comparison (``cell`` renders one figure by its path)."""
    rows_ = [
        ("quiet", "quiet", None),
        ("while pruning, no pause", "pruning", "pruning_rows_per_s"),
        (
            f"while pruning, {PAUSE * 1000:g} ms between batches",
            "pruning_paused",
            "pruning_paused_rows_per_s",
        ),
    ]
    body = [
        "| "
        + " | ".join(
            [
                label,
                cell(r, f"retention.{key}_p50_ms"),
                cell(r, f"retention.{key}_p99_ms"),
                "-" if key == "quiet" else cell(r, f"retention.{key}_vs_quiet_p99"),
                "-" if rate is None else cell(r, f"retention.{rate}"),
            ]
        )
        + " |"
        for label, key, rate in rows_
    ]
    return [
        "## Claim latency while `outbox prune` runs",
        "",
        f"{cell(r, 'retention.variant')}.",
        "",
        "| series | claim p50, ms | claim p99, ms | p99 vs quiet | prune rows/s |",
        "| --- | --- | --- | --- | --- |",
        *body,
    ]
