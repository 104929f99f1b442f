"""The claim's derived forms: ``CLAIM`` (:mod:`.statements`) rewritten, at render time, for a
queue table that needs more than the plain claim.

- :func:`legacy_null_due`: a table whose due column may hold NULL (ADR 0017's rollout);
- :func:`per_key_order`: a table ordered by a key column, the event outbox (ADR 0020, ADR 0023);
- :func:`without_floor`: either of them, whose order or due times the scan floor cannot bound.

Each takes the template *as the store reads it* from :mod:`.statements`, so every mutant of
``CLAIM`` (docs/testing.md) reaches these tables too; each line it rewrites must be in the template
as is, or it raises :class:`LookupError` instead of running a claim without its guard.
"""

from __future__ import annotations

import functools

from psycopg import sql

__all__ = [
    "FLOOR_TEST",
    "PROBE_EACH_CANDIDATE",
    "legacy_null_due",
    "per_key_order",
    "without_floor",
]

#: The lines of ``CLAIM`` that :func:`legacy_null_due` widens (each must be in the template as is).
_DUE_TEST = "      AND next_attempt_at <= coalesce(%(now)s::timestamptz, now())\n"
_DUE_ORDER = "    ORDER BY next_attempt_at, id\n"
#: The scan's lower bound (``outbox_core.scan_floor``): a claim whose previous one came back full
#: starts past the index entries below it. Only the plain claim keeps it: :func:`legacy_null_due`
#: (NULL due times) and :func:`per_key_order` (id order) drop it, and their stores pass no floor.
FLOOR_TEST = "      AND next_attempt_at >= coalesce(%(floor)s::timestamptz, '-infinity')\n"


def without_floor(claim: str) -> str:
    """``claim`` without its scan floor (a claim whose order or due times the floor can't bound)."""
    return claim.replace(FLOOR_TEST, "")


@functools.lru_cache(maxsize=16)
def legacy_null_due(claim: str) -> str:
    """``claim`` (the ``CLAIM`` template as the store reads it, mutants included) for a table
    built with ``queue_table(..., legacy_null_due=True)``: a pending row whose due time is NULL is
    due too, and such rows come first.

    Legacy rollout (ADR 0017): webhook deliveries written before every delivery was born leased
    could carry a NULL due time, and such a row must still be delivered. The branch stays, with its
    regression test, until no such row can exist; other tables never get it. Derived here, at
    render time, from the one ``CLAIM`` template, so a mutant of ``CLAIM`` reaches this table too.
    """
    if _DUE_TEST not in claim or _DUE_ORDER not in claim:
        msg = "the CLAIM template lost its due-time line or its ORDER BY; legacy_null_due can't widen it"
        raise LookupError(msg)
    return (
        without_floor(claim)
        .replace(
            _DUE_TEST,
            "      AND (next_attempt_at <= coalesce(%(now)s::timestamptz, now())"
            "\n           OR next_attempt_at IS NULL)\n",
        )
        .replace(_DUE_ORDER, "    ORDER BY next_attempt_at NULLS FIRST, id\n")
    )


#: The lines of ``CLAIM`` that :func:`per_key_order` extends (each must be in the template as is).
_CLAIMED_JOIN = "    WHERE m.id = due.id\n"
_RESULT_ORDER = "ORDER BY due_at, id\n"

#: The per-key claim's first guard, added to the ``due`` CTE: a row is a candidate only if no
#: EARLIER row of its key is pending and not due (waiting out a retry after a failed attempt, or
#: leased by a claim that committed). So a blocked key's later rows never take a batch's slots,
#: and the other keys go on. The one exception is a row leased by ``%(ahead_of)s``, the batch the
#: same worker is still sending when it claims ahead (ADR 0023): the worker sends the rows claimed
#: ahead only once every row of that batch is recorded terminal (``outbox_core.lease``).
#:
#: The blocked keys are read once a claim, not once a candidate: a subquery that depends on no
#: candidate (PostgreSQL runs it once, as an InitPlan) maps each blocked key to its first row that
#: is not due, through the due-time index (the rows not due are the leased ones and the retries,
#: few beside the backlog), and each candidate is looked up in that map. A candidate of a blocked
#: key passes only if it comes before that first row. Probing the key-order index for every
#: candidate instead cost about 8 µs a candidate once the keys no longer fit in the cache, and a
#: claim walks every due row of the blocked keys before it reaches the others: with 200,000 events
#: of 1,000 keys waiting out a retry (a topic with no stream, a broker outage), 1.6 s a claim
#: against about 0.1 s with the map (docs/benchmarks.md). The row that maps to a key can't be a
#: candidate (one is due, the other not, in the statement's one snapshot), so ``<`` and ``<=``
#: agree.
_KEY_NOT_BLOCKED = """      AND coalesce({queue}.id < ((
          SELECT jsonb_object_agg(blocked.key, blocked.first_id)
          FROM (
              SELECT earlier.{key}::text AS key, min(earlier.id) AS first_id
              FROM {queue} AS earlier
              WHERE earlier.lane = %(lane)s
                AND earlier.status = 'pending'
                AND earlier.next_attempt_at > coalesce(%(now)s::timestamptz, now())
                AND (earlier.claim_token IS NULL
                     OR earlier.claim_token IS DISTINCT FROM %(ahead_of)s::text)
              GROUP BY 1
          ) AS blocked
      ) ->> {queue}.{key}::text)::bigint, true)
"""
#: The line that keeps a ``NOT EXISTS`` a subquery run once per outer row: PostgreSQL does not turn
#: a subquery with an ``OFFSET`` into an anti-join, so the check stays a probe of the key-order
#: index (``ix_<table>_key_order``: lane, key, id, pending rows) for each candidate. It closes the
#: subquery of ``_KEY_ALL_EARLIER_CLAIMED``.
PROBE_EACH_CANDIDATE = "          OFFSET 0\n"

#: Its second guard, on the UPDATE: a candidate is claimed only if EVERY earlier pending row of its
#: key is in this very claim. That closes what the first guard cannot see: an earlier row that is
#: due but was skipped because another transaction holds it (a concurrent claim not yet
#: committed, a mark in flight). Here too a row still leased by ``%(ahead_of)s`` does not count.
#: The guard probes each candidate's key in the key-order index (:data:`PROBE_EACH_CANDIDATE`):
#: left to itself, the planner hash-joins every pending row of the table for a backlog of some
#: ten thousand rows and more, so each claim would cost in proportion to the backlog instead of
#: the batch (20,000 pending events: about 70 ms a claim of 500 instead of about 17;
#: docs/benchmarks.md).
_KEY_ALL_EARLIER_CLAIMED = """      AND NOT EXISTS (
          SELECT FROM {queue} AS earlier
          WHERE earlier.lane = m.lane
            AND earlier.{key} = m.{key}
            AND earlier.status = 'pending'
            AND earlier.id < m.id
            AND earlier.id NOT IN (SELECT id FROM due)
            AND (earlier.claim_token IS NULL
                 OR earlier.claim_token IS DISTINCT FROM %(ahead_of)s::text
                 OR earlier.next_attempt_at <= coalesce(%(now)s::timestamptz, now()))
          OFFSET 0
      )
"""


@functools.lru_cache(maxsize=16)
def per_key_order(claim: str, key: str) -> str:
    """``claim`` (the ``CLAIM`` template as the store reads it, mutants included) for a table built
    with ``queue_table(..., ordered_by=key)``: rows are taken, and handed out, in id order, and a
    row is never taken while an earlier row of the same ``key`` is pending and not in this claim.

    Per-key order (ADR 0020): the event relay must never publish a later event of a key while an
    earlier one is unpublished, across retries (the earlier row waits for its backoff) and across
    a crashed relay (the earlier row is leased until its lease ends). Derived here, at render time,
    from the one ``CLAIM`` template, so every mutant of ``CLAIM`` reaches this table too; other
    tables' claims are unchanged. ``key`` is a column name ``queue_table`` checked (a plain
    identifier); it is quoted here.
    """
    for line in (_DUE_TEST, _DUE_ORDER, _CLAIMED_JOIN, _RESULT_ORDER):
        if line not in claim:
            msg = (
                f"the CLAIM template lost the line {line.strip()!r}; per_key_order can't extend it"
            )
            raise LookupError(msg)
    column = sql.Identifier(key).as_string(None)
    guard = _KEY_NOT_BLOCKED.replace("{key}", column)
    complete = _KEY_ALL_EARLIER_CLAIMED.replace("{key}", column)
    return (
        without_floor(claim)
        .replace(_DUE_TEST, _DUE_TEST + guard)
        .replace(_DUE_ORDER, "    ORDER BY id\n")
        .replace(_CLAIMED_JOIN, _CLAIMED_JOIN + complete)
        .replace(_RESULT_ORDER, "ORDER BY id\n")
    )
