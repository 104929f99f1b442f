"""The rows every comparison works on, loaded in one statement, and the check that a drain did
exactly the work it should (every row dispatched once, its secret scrubbed)."""

from __future__ import annotations

import contextlib
import json
from typing import Any, Final

import psycopg

__all__ = [
    "LANE",
    "PAYLOAD",
    "DrainCheck",
    "checkpoint",
    "load_history",
    "load_pending",
    "load_pending_only",
    "payload_json",
    "reset",
    "verify_drain",
]

#: The lane every comparison uses.
LANE: Final = "email"

#: A small e-mail row with one secret key, so the dispatched mark has a key to scrub (as in life).
PAYLOAD: Final = {
    "to": "user@bench.example",
    "subject": "Reset your password, $name",
    "text": "Hello $name, choose a new password here: $password_reset_url",
    "name": "bench user",
    "password_reset_url": "https://bench.example/reset/0123456789abcdef",
}

#: N due rows in one statement, due a minute ago, in id order.
LOAD_PENDING: Final = """
INSERT INTO outbox_message (lane, payload, next_attempt_at)
SELECT %(lane)s, %(payload)s::jsonb, now() - interval '1 minute'
FROM generate_series(1, %(rows)s)
"""

#: N sent rows, as the worker leaves them: dispatched once, scrubbed, resolved in the past.
LOAD_HISTORY: Final = """
INSERT INTO outbox_message (
    lane, status, payload, attempts, next_attempt_at, claim_token, claimed_at,
    created_at, updated_at, resolved_at, scrubbed_at
)
SELECT %(lane)s, 'dispatched', %(payload)s::jsonb, 1, t, md5(g::text), t, t, t, t, t
FROM generate_series(1, %(rows)s) AS g,
     LATERAL (SELECT now() - interval '30 days' + g * interval '1 millisecond') AS x(t)
"""

#: What a drain left: every row dispatched exactly once, and scrubbed.
VERIFY: Final = """
SELECT count(*) AS rows,
       count(*) FILTER (WHERE status = 'dispatched') AS dispatched,
       count(*) FILTER (WHERE attempts <> 1) AS not_once,
       count(*) FILTER (
           WHERE status = 'dispatched'
             AND (scrubbed_at IS NULL OR payload ? 'password_reset_url')
       ) AS unscrubbed
FROM outbox_message
WHERE lane = %(lane)s
"""


def payload_json(payload: dict[str, Any] | None = None) -> str:
    """The payload as the JSON text the load statements take."""
    return json.dumps(PAYLOAD if payload is None else payload)


def reset(dsn: str) -> None:
    """Empty the outbox table (between runs)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE outbox_message")


def load_pending(
    dsn: str, rows: int, *, lane: str = LANE, payload: dict[str, Any] | None = None
) -> None:
    """``rows`` due rows, then VACUUM ANALYZE so every run starts from the same planner view."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(LOAD_PENDING, {"lane": lane, "rows": rows, "payload": payload_json(payload)})
        conn.execute("VACUUM ANALYZE outbox_message")


def load_pending_only(dsn: str, rows: int, *, lane: str = LANE) -> None:
    """``rows`` due rows and nothing else: no VACUUM, no ANALYZE (the table is left as it is)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(LOAD_PENDING, {"lane": lane, "rows": rows, "payload": payload_json()})


def load_history(dsn: str, rows: int, *, lane: str = LANE) -> None:
    """``rows`` sent rows in one INSERT … SELECT generate_series, then VACUUM ANALYZE."""
    history = {key: value for key, value in PAYLOAD.items() if key != "password_reset_url"}
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(LOAD_HISTORY, {"lane": lane, "rows": rows, "payload": json.dumps(history)})
        conn.execute("VACUUM ANALYZE outbox_message")


def checkpoint(dsn: str) -> None:
    """Flush dirty pages now, so a checkpoint is less likely to land inside a timed run."""
    with (
        psycopg.connect(dsn, autocommit=True) as conn,
        contextlib.suppress(psycopg.errors.InsufficientPrivilege),
    ):
        conn.execute("CHECKPOINT")


class DrainCheck(RuntimeError):
    """A drain did not leave every row dispatched exactly once and scrubbed."""


def verify_drain(dsn: str, expected: int, *, lane: str = LANE, what: str = "drain") -> None:
    """Raise :class:`DrainCheck` unless all ``expected`` rows were dispatched once and scrubbed."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(VERIFY, {"lane": lane}).fetchone()
    rows, dispatched, not_once, unscrubbed = row if row is not None else (0, 0, 0, 0)
    if (rows, dispatched, not_once, unscrubbed) != (expected, expected, 0, 0):
        raise DrainCheck(
            f"{what}: expected {expected} rows dispatched once and scrubbed; found {rows} rows,"
            f" {dispatched} dispatched, {not_once} not claimed exactly once, {unscrubbed} unscrubbed"
        )
