"""Claim latency as the sent history grows (0 → 1M → 5M rows), and right after churn.

Sent rows are kept (they are the delivery record). The claim walks the partial index over pending
rows only, so its latency should not depend on how many rows were sent; what can hurt is dead
tuples, so the churn case pushes rows through claim + mark with autovacuum left to the table's own
settings and measures at once, without a manual VACUUM.

Growth: one database; history is added in one ``INSERT … SELECT generate_series`` (status
``dispatched``), then ``VACUUM ANALYZE``. At each size and run, ``claims x 10`` due rows are
inserted and ``claims`` claims of 10 are timed (the library's CLAIM statement, one round trip each,
autocommit, prepared by psycopg after 5 runs as in the store), each followed by the fenced marks of
its rows (not timed). A plain VACUUM precedes each run, so each run starts from the same state: a
series leaves two dead row versions per claimed row at the front of the pending index, and the
next run would otherwise walk them (that effect is what the churn case measures).

Churn: a second database; rows are inserted 10,000 at a time and pushed through claim (1,000 per
statement) and mark (the batch's rows in one UPDATE: the same dead row versions as per-row marks),
with no manual VACUUM. Then the same timed claims. That state is consumed by measuring it (the first
scan marks dead index entries, so later ones are faster), so it is measured once: the first claim and
the p50/p99 of that one series; then again after a manual VACUUM, for contrast.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Final

import psycopg

from bench import rows
from bench.server import fresh_database
from bench.settings import Sizes
from bench.stats import Figure, percentile
from outbox_adapters.postgres import statements
from outbox_adapters.postgres.tables import outbox_message
from outbox_core.scan_floor import ScanFloor
from outbox_core.scrub import DEFAULT_SECRET_KEYS

__all__ = ["measure", "series", "size_label", "timed_claims", "vacuum"]

CLAIM_BATCH: Final = 10
LEASE: Final = timedelta(minutes=11)
CHURN_CHUNK: Final = 10_000
CHURN_CLAIM: Final = 1_000

#: The churn's mark: the claimed batch dispatched and scrubbed, fenced by the claim's token.
CHURN_MARK: Final = """
UPDATE outbox_message
SET status = 'dispatched', resolved_at = now(), payload = payload - %(scrub)s::text[],
    scrubbed_at = now(), updated_at = now()
WHERE id = ANY(%(ids)s) AND status = 'pending' AND claim_token = %(token)s
"""

#: The plan counters of this connection's prepared claim (PostgreSQL 14+).
PREPARED_CLAIM_PLANS: Final = """
SELECT generic_plans, custom_plans FROM pg_prepared_statements
WHERE statement LIKE '%FOR UPDATE SKIP LOCKED%'
"""

#: What autovacuum had done to the table when the churn's claims were timed.
TABLE_STATS: Final = """
SELECT n_live_tup, n_dead_tup, autovacuum_count, autoanalyze_count,
       last_autovacuum IS NOT NULL AS autovacuumed
FROM pg_stat_user_tables WHERE relname = 'outbox_message'
"""


def size_label(n: int) -> str:
    """``0``, ``200k``, ``1M``, ``5M``: the key a history size is filed under."""
    if n and n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    if n and n % 1_000 == 0:
        return f"{n // 1_000}k"
    return str(n)


def _claim_params(token: str, floor: ScanFloor | None = None) -> dict[str, Any]:
    """The claim's parameters; ``floor``: where the store's claim would start its scan."""
    return {
        "lane": rows.LANE,
        "limit": CLAIM_BATCH,
        "lease": LEASE,
        "token": token,
        "now": None,
        "floor": None if floor is None else floor.floor,
    }


#: The store's claim and mark, as it runs them on the e-mail outbox table.
_CLAIM = statements.render(statements.CLAIM, outbox_message)
_MARK = statements.render(statements.MARK, outbox_message)


def _mark_params(row_id: int, token: str) -> dict[str, Any]:
    return {
        "id": row_id,
        "token": token,
        "status": "dispatched",
        "reason": None,
        "retry_delay": None,
        "scrub_keys": sorted(DEFAULT_SECRET_KEYS),
        "patch": "{}",
        "refund": False,
        "now": None,
    }


def _plans(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """How the server planned this connection's claims, and what one custom plan costs to make.

    psycopg prepares a statement after 5 executions; PostgreSQL then either settles on a generic
    plan (made once) or keeps making a custom plan at every execution. On a big table a custom plan
    can take milliseconds to make, and that shows in the claim latency.
    """
    row = conn.execute(PREPARED_CLAIM_PLANS).fetchone()
    generic, custom = (int(row[0]), int(row[1])) if row else (0, 0)
    explained = conn.execute(
        "EXPLAIN (SUMMARY) " + _CLAIM, _claim_params("explain"), prepare=False
    ).fetchall()
    planning = next(
        (float(line.split(":")[1].split()[0]) for (line,) in explained if "Planning" in line),
        float("nan"),
    )
    return {"generic_plans": generic, "custom_plans": custom, "custom_planning_ms": planning}


def timed_claims(
    dsn: str, claims: int, *, while_: Callable[[], bool] | None = None, preload: bool = True
) -> tuple[list[float], dict[str, Any]]:
    """Insert ``claims x 10`` due rows (unless ``preload`` is False: the caller did), then time
    ``claims`` claims of 10 (ms), marking each; with ``while_``, stop early once it answers False
    (at most ``claims`` either way)."""
    if preload:
        rows.load_pending_only(dsn, claims * CLAIM_BATCH)
    timings: list[float] = []
    floor = ScanFloor()  # as the store keeps it for the lane (outbox_core.scan_floor)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for _ in range(claims):
            if while_ is not None and not while_():
                break
            token = secrets.token_hex(16)
            started = time.perf_counter()
            claimed = conn.execute(_CLAIM, _claim_params(token, floor)).fetchall()
            timings.append((time.perf_counter() - started) * 1000.0)
            floor.claimed(CLAIM_BATCH, [row[8] for row in claimed])
            if len(claimed) != CLAIM_BATCH:
                raise RuntimeError(f"a history claim took {len(claimed)} rows, expected 10")
            for row in claimed:
                conn.execute(_MARK, _mark_params(row[0], token))
        plans = _plans(conn)
    return timings, plans


def _load_churn(dsn: str, total: int, log: Callable[[str], None]) -> float:
    """Push ``total`` rows through insert → claim → mark; returns the seconds it took."""
    started = time.perf_counter()
    scrub = sorted(DEFAULT_SECRET_KEYS)
    with psycopg.connect(dsn, autocommit=True) as conn:
        done = 0
        while done < total:
            chunk = min(CHURN_CHUNK, total - done)
            conn.execute(
                rows.LOAD_PENDING,
                {"lane": rows.LANE, "rows": chunk, "payload": rows.payload_json()},
            )
            while True:
                token = secrets.token_hex(16)
                params = {**_claim_params(token), "limit": CHURN_CLAIM}
                ids = [r[0] for r in conn.execute(_CLAIM, params).fetchall()]
                if not ids:
                    break
                conn.execute(CHURN_MARK, {"ids": ids, "token": token, "scrub": scrub})
            done += chunk
            if done % (CHURN_CHUNK * 20) == 0:
                log(f"history churn: {done:,} rows through claim + mark")
    return time.perf_counter() - started


def _autovacuum(dsn: str) -> bool:
    """Whether the server runs autovacuum at all (a per-table setting can't turn it on)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SHOW autovacuum").fetchone()
    return row is not None and row[0] == "on"


def vacuum(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM outbox_message")


def _table_stats(dsn: str) -> dict[str, Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(TABLE_STATS)
        names = [c.name for c in cur.description or ()]
        row = cur.fetchone()
    return dict(zip(names, row, strict=True)) if row is not None else {}


def series(timings: list[float]) -> tuple[float, float]:
    return percentile(timings, 50), percentile(timings, 99)


def _growth(server_dsn: str, sizes: Sizes, runs: int, log: Callable[[str], None]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with fresh_database(server_dsn, "history") as dsn:
        loaded = 0
        for target in sorted(sizes.history_sizes):
            started = time.perf_counter()
            if target > loaded:
                rows.load_history(dsn, target - loaded)
                loaded = target
            load_seconds = time.perf_counter() - started
            p50s, p99s, firsts, plans = [], [], [], []
            for run in range(runs):
                # Each series leaves 2 dead row versions per claimed row at the front of the
                # pending index; without this, run 3 would walk the dead entries of runs 1 and 2.
                vacuum(dsn)
                timings, plan = timed_claims(dsn, sizes.history_claims)
                plans.append(plan)
                p50, p99 = series(timings)
                p50s.append(p50)
                p99s.append(p99)
                firsts.append(timings[0])
                log(
                    f"history {size_label(target)} run {run + 1}: claim p50 {p50:.2f} ms,"
                    f" p99 {p99:.2f} ms ({plan['generic_plans']} generic /"
                    f" {plan['custom_plans']} custom plans; one custom plan takes"
                    f" {plan['custom_planning_ms']:.2f} ms to make)"
                )
            out[size_label(target)] = {
                "rows": target,
                "claim_p50_ms": Figure.of(p50s, "ms"),
                "claim_p99_ms": Figure.of(p99s, "ms"),
                "first_claim_ms": Figure.of(firsts, "ms"),
                "load_seconds": round(load_seconds, 1),
                "plans": plans,
            }
    return out


def _churn(server_dsn: str, sizes: Sizes, log: Callable[[str], None]) -> dict[str, Any]:
    with fresh_database(server_dsn, "churn") as dsn:
        autovacuum = _autovacuum(dsn)
        seconds = _load_churn(dsn, sizes.churn_rows, log)
        stats = _table_stats(dsn)
        timings, plan = timed_claims(dsn, sizes.history_claims)
        p50, p99 = series(timings)
        log(f"history after churn: first claim {timings[0]:.2f} ms, p50 {p50:.2f} ms")
        vacuum(dsn)
        vacuumed, vacuumed_plan = timed_claims(dsn, sizes.history_claims)
        v50, v99 = series(vacuumed)
    return {
        "rows": sizes.churn_rows,
        "claim_p50_ms": Figure.of([p50], "ms"),
        "claim_p99_ms": Figure.of([p99], "ms"),
        "first_claim_ms": Figure.of([timings[0]], "ms"),
        "after_vacuum_claim_p50_ms": Figure.of([v50], "ms"),
        "after_vacuum_claim_p99_ms": Figure.of([v99], "ms"),
        "churn_seconds": round(seconds, 1),
        "table_stats_at_measurement": stats,
        "plans": plan,
        "plans_after_vacuum": vacuumed_plan,
        "note": (
            f"{size_label(sizes.churn_rows)} rows went through claim + mark"
            f"{' (quick: 200k instead of 1M)' if sizes.churn_rows < 1_000_000 else ''};"
            + (
                " autovacuum on with the table's own settings"
                if autovacuum
                else " autovacuum is OFF on this server (its setting, left alone: the server is"
                " shared), so this is the no-autovacuum case"
            )
            + ", no manual VACUUM before the timed claims; one series (measuring consumes the"
            " state)"
        ),
        "autovacuum": autovacuum,
    }


def measure(server_dsn: str, sizes: Sizes, runs: int, log: Callable[[str], None]) -> dict[str, Any]:
    out = _growth(server_dsn, sizes, runs, log)
    out["after_churn"] = _churn(server_dsn, sizes, log)
    out["claims_per_series"] = sizes.history_claims
    out["rows_per_claim"] = CLAIM_BATCH
    return out
