"""Every SQL statement the PostgreSQL store and enqueue run, one name each (the leader lease's two
are in :mod:`.leader`).

Parameters are psycopg's ``%(name)s``; an array of values is ``%(name)b``, dumped in PostgreSQL's
binary format (a grouped mark's arrays of 500 values dump about four times faster than as text,
where every element is quoted and escaped). ``now`` is optional everywhere:
``coalesce(%(now)s, now())`` uses the database clock in production (one clock for every replica)
and lets tests inject a time.

The statements on a queue table are *templates*, one per operation for every queue table: ``{queue}``
stands for the table (quoted by :func:`render` with ``psycopg.sql.Identifier``) and
``{queue_name}`` for its name as a string literal (the key of its audit and stale-mark rows). Only a
table built by :func:`outbox_adapters.postgres.tables.queue_table` is rendered, so no free text
ever reaches a statement.

The store reads these names *when it runs them* (``render(statements.CLAIM, table)``, cached per
template text and table), never copies them at import: this module is the seam of the SQL mutation
matrix (docs/testing.md), which swaps a template for a mutant (``SKIP LOCKED`` removed, the
lease stamp dropped, a guard dropped, the scrub dropped) and checks that the test locking that
mechanism turns red, on whichever table the store runs. Each mechanism therefore sits on a line of
its own, so a mutant is one deleted or edited line.
"""

from __future__ import annotations

import functools

from psycopg import sql
from sqlalchemy import Table

from outbox_adapters.postgres.tables import check_queue_table

__all__ = [
    "CLAIM",
    "COUNT_STALE",
    "COUNT_STALE_MANY",
    "DISABLE_ENDPOINTS",
    "ENQUEUE",
    "ENQUEUE_EXISTING",
    "LISTEN",
    "MARK",
    "MARK_MANY",
    "MARK_SENT",
    "MARK_SENT_MANY",
    "RELEASE",
    "WAKEUP_CHANNEL",
    "render",
]


def render(template: str, table: Table) -> str:
    """``template`` for ``table`` (a :func:`~outbox_adapters.postgres.tables.queue_table`), its
    identifiers quoted; :class:`~outbox_core.errors.ConfigurationError` for any other table."""
    check_queue_table(table)
    return _render(template, table.schema, table.name)


@functools.lru_cache(maxsize=256)
def _render(template: str, schema: str | None, name: str) -> str:
    ident = sql.Identifier(schema, name) if schema else sql.Identifier(name)
    return (
        sql.SQL(template)  # a template of this module, never user text
        .format(queue=ident, queue_name=sql.Literal(name), channel=sql.Literal(WAKEUP_CHANNEL))
        .as_string(None)
    )


# --- producer ------------------------------------------------------------------------------------

#: The LISTEN/NOTIFY channel that wakes idle workers (ADR 0011); the payload is the lane.
WAKEUP_CHANNEL = "outbox_wakeup"

#: Enqueue on the host's own transaction. With a key already seen in the lane, nothing is written
#: and no row comes back (the conflict target names the partial unique index's predicate, which is
#: how PostgreSQL infers a partial index). ``not_before`` NULL means due at once.
#: With ``notify``, the lane's listeners are woken from the SAME statement, so it costs no
#: round trip: ``pg_notify`` runs once per row the INSERT created (never on a key conflict), is
#: delivered only when the host's transaction commits (never on rollback), and PostgreSQL folds
#: identical notifications of one transaction, so a batch enqueue wakes each lane once.
ENQUEUE = """
WITH created AS (
    INSERT INTO {queue} (lane, payload, idempotency_key, next_attempt_at, trace_context)
    VALUES (
        %(lane)s,
        %(payload)s::jsonb,
        %(idempotency_key)s,
        coalesce(%(not_before)s::timestamptz, now()),
        %(trace_context)s
    )
    ON CONFLICT (lane, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING id
)
SELECT id,
       CASE WHEN %(notify)s::boolean THEN pg_notify({channel}, %(lane)s) END
FROM created
"""

#: The row an earlier enqueue with the same lane and key wrote.
ENQUEUE_EXISTING = """
SELECT id FROM {queue}
WHERE lane = %(lane)s AND idempotency_key = %(idempotency_key)s
"""

# --- worker --------------------------------------------------------------------------------------

#: The wake-up listener's one statement, on its own autocommit connection (postgres/notify.py).
LISTEN = f"LISTEN {WAKEUP_CHANNEL}"  # a constant identifier, not a template

#: Claim-lease (ADR 0006, "Claim"), one short committed transaction:
#: lock up to ``limit`` due rows of the lane, skipping rows another transaction holds, then count
#: the attempt (the ONLY place attempts grow), stamp the lease (``next_attempt_at = now + lease``:
#: no sibling sees the row as due until it expires) and the claim's fencing token.
#: Rows come back in claim order (due time, then id). The payload comes back as TEXT, decoded by
#: the store row by row: PostgreSQL stores JSON that Python can't read (nesting past the recursion
#: limit, a 5,000-digit number), and a decoder error inside the fetch would fail, and roll back,
#: the whole claim for ever, one bad row blocking its lane. ``%(floor)s`` (NULL: none) is where the
#: scan starts (:data:`.claim_forms.FLOOR_TEST`, ``outbox_core.scan_floor``); each row's due time comes back
#: last, for the next claim's floor.
CLAIM = """
WITH due AS (
    SELECT id, next_attempt_at AS due_at
    FROM {queue}
    WHERE lane = %(lane)s
      AND status = 'pending'
      AND next_attempt_at <= coalesce(%(now)s::timestamptz, now())
      AND next_attempt_at >= coalesce(%(floor)s::timestamptz, '-infinity')
    ORDER BY next_attempt_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
claimed AS (
    UPDATE {queue} AS m
    SET attempts = m.attempts + 1,
        next_attempt_at = coalesce(%(now)s::timestamptz, now()) + %(lease)s::interval,
        claim_token = %(token)s,
        claimed_at = coalesce(%(now)s::timestamptz, now()),
        updated_at = now()
    FROM due
    WHERE m.id = due.id
    RETURNING m.id, m.lane, m.payload::text AS payload, m.attempts, m.claim_token,
              m.next_attempt_at AS lease_expires_at, m.created_at, m.trace_context, due.due_at
)
SELECT id, lane, payload, attempts, claim_token, lease_expires_at, created_at, trace_context,
       due_at
FROM claimed
ORDER BY due_at, id
"""

#: The fenced compare-and-set mark (ADR 0004), one statement = one commit.
#: Applied only while the row is still pending (status guard) under this claim's token (fence);
#: zero rows matched means the mark is stale and is dropped.
#: - a retry (status pending) sets the next due time IN DATABASE TIME (``now() + retry_delay``: the
#:   mark carries the delay, not a time read from the worker's clock, like the claim's lease) and
#:   ends the claim (token cleared), so no later mark of the same claim can land;
#: - a resolved row (dispatched/skipped/failed) keeps its token as the record of which claim
#:   resolved it, and gets ``resolved_at``;
#: - dispatched/skipped marks remove the secret payload keys IN THIS SAME UPDATE (the scrub);
#:   ``scrub_keys`` is empty for the other marks, and a failed row keeps its whole payload. Only
#:   an object has keys: ``jsonb - text[]`` raises for a string, number or null (even with no
#:   keys), and a row written around enqueue may hold one, so it must still take its mark;
#: - ``patch`` (a JSON object, ``{}`` for none) is written over the payload after the scrub, in the
#:   same UPDATE: what the attempt achieved, e.g. the recipients who already have the message
#:   (``Mark.payload_patch``, ADR 0015), so it is recorded by the fenced mark or not at all;
#: - a refund (``Mark.refund``: a deferral, the send never attempted) takes the claim's attempt
#:   back and keeps ``last_error`` and ``updated_at`` as the last real attempt left them (what
#:   endpoint health reads);
#: - a stale mark bumps the row's lane in ``outbox_stale_marks`` in the same statement (the
#:   ``stale`` CTE runs only when ``marked`` is empty, and costs nothing otherwise), so
#:   ``outbox stats`` counts stale marks from every worker without a second round trip.
#: Returns the id when the mark applied, nothing when it was stale.
MARK = """
WITH marked AS (
    UPDATE {queue}
    SET status = %(status)s::text,
        last_error = CASE WHEN %(refund)s::boolean THEN last_error ELSE %(reason)s::text END,
        attempts = CASE WHEN %(refund)s::boolean THEN greatest(attempts - 1, 0) ELSE attempts END,
        next_attempt_at = coalesce(
            coalesce(%(now)s::timestamptz, now()) + %(retry_delay)s::interval, next_attempt_at
        ),
        resolved_at = CASE WHEN %(status)s::text = 'pending' THEN NULL
                           ELSE coalesce(%(now)s::timestamptz, now()) END,
        claim_token = CASE WHEN %(status)s::text = 'pending' THEN NULL ELSE claim_token END,
        payload = CASE WHEN jsonb_typeof(payload) = 'object'
                       THEN (payload - %(scrub_keys)s::text[]) || %(patch)s::jsonb
                       ELSE payload END,
        scrubbed_at = CASE WHEN %(status)s::text IN ('dispatched', 'skipped')
                           THEN coalesce(%(now)s::timestamptz, now()) ELSE scrubbed_at END,
        updated_at = CASE WHEN %(refund)s::boolean THEN updated_at ELSE now() END
    WHERE id = %(id)s
      AND status = 'pending'
      AND claim_token = %(token)s
    RETURNING id
),
stale AS (
    INSERT INTO outbox_stale_marks AS s (queue, lane, stale_marks, last_stale_at)
    SELECT {queue_name}, lane, 1, now()
    FROM {queue}
    WHERE id = %(id)s AND NOT EXISTS (SELECT FROM marked)
    ON CONFLICT (queue, lane) DO UPDATE
    SET stale_marks = s.stale_marks + EXCLUDED.stale_marks, last_stale_at = now()
)
SELECT id FROM marked
"""

#: The common mark, lean: a row sent (dispatched) or skipped, with nothing to patch and no endpoint
#: to disable, which is nearly every mark a lane writes. The same fenced compare-and-set as
#: ``MARK`` (status guard and claim token, on lines of their own) and the same scrub in the same
#: UPDATE, but none of what such a mark never needs: no status ``CASE`` (the row is resolved), no
#: retry stamp, no token clearing (a resolved row keeps its token), no patch, and no stale-mark
#: CTE. Measured in the dispatch drain at four workers, the server's CPU a row is about 8 % less
#: than with ``MARK`` (196 against 214 µs, docs/benchmarks.md), and the two cores that lane runs
#: on are shared by the worker and the server. A mark that matches nothing
#: is counted by ``COUNT_STALE``, a second statement run only then (ADR 0006, "Stale marks").
#: Its times are the database's ``now()``: the store never injects a time into a mark.
#: Returns the id when the mark applied, nothing when it was stale.
MARK_SENT = """
UPDATE {queue}
SET status = %(status)s::text,
    last_error = %(reason)s::text,
    resolved_at = now(),
    payload = CASE WHEN jsonb_typeof(payload) = 'object'
                   THEN payload - %(scrub_keys)s::text[]
                   ELSE payload END,
    scrubbed_at = now(),
    updated_at = now()
WHERE id = %(id)s
  AND status = 'pending'
  AND claim_token = %(token)s
RETURNING id
"""

#: A ``MARK_SENT`` that matched nothing: bump the row's lane in ``outbox_stale_marks`` (what
#: ``MARK``'s ``stale`` CTE does in its own statement). Run only after a stale lean mark, so the
#: common mark pays nothing for it. An outage here raises like the mark's: the worker retries the
#: mark, which is stale again and is counted then, so a stale mark is counted once it is reported.
COUNT_STALE = """
INSERT INTO outbox_stale_marks AS s (queue, lane, stale_marks, last_stale_at)
SELECT {queue_name}, lane, 1, now()
FROM {queue}
WHERE id = %(id)s
ON CONFLICT (queue, lane) DO UPDATE
SET stale_marks = s.stale_marks + EXCLUDED.stale_marks, last_stale_at = now()
"""

#: ``MARK_SENT`` for a group: the grouped marks of rows sent (dispatched) or skipped, nothing to
#: patch, one set of scrub keys for all, which is nearly every group a lane writes. Each row is
#: fenced on its own (status guard and its claim's token, on lines of their own), the scrub is in
#: the same UPDATE, and none of ``MARK_MANY``'s per-row ``CASE`` columns, patches or stale-mark CTE
#: is there: PostgreSQL spends about a quarter less on a group of 500 (about 11 against 15 ms,
#: docs/benchmarks.md). The marks that matched nothing are counted by ``COUNT_STALE_MANY``, run only
#: then. Returns the ids that applied.
MARK_SENT_MANY = """
UPDATE {queue} AS m
SET status = v.status,
    last_error = v.reason,
    resolved_at = now(),
    payload = CASE WHEN jsonb_typeof(m.payload) = 'object'
                   THEN m.payload - %(scrub_keys)s::text[]
                   ELSE m.payload END,
    scrubbed_at = now(),
    updated_at = now()
FROM unnest(%(ids)b::bigint[], %(tokens)b::text[], %(statuses)b::text[], %(reasons)b::text[])
    AS v(id, token, status, reason)
WHERE m.id = v.id
  AND m.status = 'pending'
  AND m.claim_token = v.token
RETURNING m.id
"""

#: The marks of a ``MARK_SENT_MANY`` that matched nothing, counted per lane in
#: ``outbox_stale_marks`` (what ``MARK_MANY``'s ``stale`` CTE does in its own statement).
COUNT_STALE_MANY = """
INSERT INTO outbox_stale_marks AS s (queue, lane, stale_marks, last_stale_at)
SELECT {queue_name}, lane, count(*), now()
FROM {queue}
WHERE id = ANY(%(ids)b::bigint[])
GROUP BY lane
ON CONFLICT (queue, lane) DO UPDATE
SET stale_marks = s.stale_marks + EXCLUDED.stale_marks, last_stale_at = now()
"""

#: The grouped mark (opt-in, ``LaneConfig.group_marks``): the marks of one window of rows in flight,
#: ONE statement and one commit, each row still fenced on its own (status guard and its claim's
#: token), so a mark that lost its row is dropped while the others apply. Same columns as ``MARK``;
#: the scrub keys are shared by the group (``scrub`` says which rows take them), each row has its
#: own ``patch`` (``{}`` for none), and the stale ones are counted per lane as by ``MARK``.
#: Returns the ids that applied.
MARK_MANY = """
WITH v AS (
    SELECT *
    FROM unnest(
        %(ids)b::bigint[], %(tokens)b::text[], %(statuses)b::text[], %(reasons)b::text[],
        %(retry_delays)b::interval[], %(scrubs)b::boolean[], %(patches)b::text[],
        %(refunds)b::boolean[]
    ) AS v(id, token, status, reason, retry_delay, scrub, patch, refund)
),
marked AS (
    UPDATE {queue} AS m
    SET status = v.status,
        last_error = CASE WHEN v.refund THEN m.last_error ELSE v.reason END,
        attempts = CASE WHEN v.refund THEN greatest(m.attempts - 1, 0) ELSE m.attempts END,
        next_attempt_at = coalesce(
            coalesce(%(now)s::timestamptz, now()) + v.retry_delay, m.next_attempt_at
        ),
        resolved_at = CASE WHEN v.status = 'pending' THEN NULL
                           ELSE coalesce(%(now)s::timestamptz, now()) END,
        claim_token = CASE WHEN v.status = 'pending' THEN NULL ELSE m.claim_token END,
        payload = CASE WHEN jsonb_typeof(m.payload) <> 'object' THEN m.payload
                       WHEN v.scrub THEN (m.payload - %(scrub_keys)s::text[]) || v.patch::jsonb
                       ELSE m.payload || v.patch::jsonb END,
        scrubbed_at = CASE WHEN v.status IN ('dispatched', 'skipped')
                           THEN coalesce(%(now)s::timestamptz, now()) ELSE m.scrubbed_at END,
        updated_at = CASE WHEN v.refund THEN m.updated_at ELSE now() END
    FROM v
    WHERE m.id = v.id
      AND m.status = 'pending'
      AND m.claim_token = v.token
    RETURNING m.id
),
stale AS (
    INSERT INTO outbox_stale_marks AS s (queue, lane, stale_marks, last_stale_at)
    SELECT {queue_name}, q.lane, count(*), now()
    FROM v JOIN {queue} AS q ON q.id = v.id
    WHERE v.id NOT IN (SELECT id FROM marked)
    GROUP BY q.lane
    ON CONFLICT (queue, lane) DO UPDATE
    SET stale_marks = s.stale_marks + EXCLUDED.stale_marks, last_stale_at = now()
)
SELECT id FROM marked
"""

#: What a failed mark with ``Mark.disable_endpoint`` (HTTP 410 Gone) adds, in the MARK's own
#: transaction and only for the rows whose mark applied: the endpoint each row delivers to is
#: disabled, with the mark's reason. Only a queue table with an ``endpoint_id`` column takes it
#: (the webhook deliveries); an endpoint already disabled keeps its first reason and time. It
#: returns each endpoint it disabled (once, however many of the marks deliver to it): the store
#: enqueues the owner's notice for those, in the same transaction.
DISABLE_ENDPOINTS = """
UPDATE outbox_webhook_endpoint AS e
SET enabled = false,
    disabled_reason = v.reason,
    disabled_at = now(),
    updated_at = now()
FROM unnest(%(ids)b::bigint[], %(reasons)b::text[]) AS v(id, reason)
JOIN {queue} AS d ON d.id = v.id
WHERE e.id = d.endpoint_id
  AND e.enabled
RETURNING e.id, e.tenant, e.url, e.event_types, e.enabled, e.owner_email, e.disabled_reason,
          e.disabled_at, e.created_at, e.updated_at, coalesce(e.scheme, 'v1') AS scheme,
          e.max_per_second, e.description
"""

#: Give back a claimed row that was never started (graceful shutdown): due now, the claim's
#: attempt refunded, the claim ended. Fenced exactly like a mark.
RELEASE = """
UPDATE {queue}
SET attempts = greatest(attempts - 1, 0),
    next_attempt_at = coalesce(%(now)s::timestamptz, now()),
    claim_token = NULL,
    claimed_at = NULL,
    updated_at = now()
WHERE id = %(id)s
  AND status = 'pending'
  AND claim_token = %(token)s
"""
