"""The operator's SQL on a queue table (``outbox get|failed|stats|requeue|keys rotate``): templates
rendered per table like those of :mod:`.statements` (``{queue}``, ``{queue_name}``), read by the
store when it runs them, so the mutation matrix can swap one for a mutant."""

from __future__ import annotations

__all__ = [
    "COUNTS",
    "FAILED_BY_ERROR",
    "FAILED_ROWS",
    "GET_ROW",
    "REQUEUE",
    "REQUEUED_ROW",
    "REQUEUE_CANDIDATES_BY_FILTER",
    "REQUEUE_CANDIDATES_BY_ID",
    "REWRITE_CANDIDATES",
    "REWRITE_PAYLOADS",
    "STALE_COUNTS",
]

#: Requeue, step 1 (by id): lock the named rows so their state can't change before step 2, and
#: read what ``check_requeue`` needs. Ids that come back nowhere are unknown.
REQUEUE_CANDIDATES_BY_ID = """
SELECT id, status, scrubbed_at IS NOT NULL AS scrubbed
FROM {queue}
WHERE id = ANY(%(ids)b::bigint[])
ORDER BY id
FOR UPDATE
"""

#: Requeue, step 1 (by filter): lock the failed rows that match every filter given (NULL = any).
REQUEUE_CANDIDATES_BY_FILTER = """
SELECT id, status, scrubbed_at IS NOT NULL AS scrubbed
FROM {queue}
WHERE status = 'failed'
  AND (%(lane)s::text IS NULL OR lane = %(lane)s::text)
  AND (%(failed_since)s::timestamptz IS NULL OR resolved_at >= %(failed_since)s::timestamptz)
  AND (%(failed_before)s::timestamptz IS NULL OR resolved_at < %(failed_before)s::timestamptz)
  AND (%(error_contains)s::text IS NULL OR strpos(last_error, %(error_contains)s::text) > 0)
ORDER BY id
FOR UPDATE
"""

#: What a requeued row becomes (``outbox requeue`` and a redrive's re-arm alike): pending, attempts
#: reset, due now, the claim and the error cleared.
REQUEUED_ROW = """
    SET status = 'pending',
        attempts = 0,
        next_attempt_at = now(),
        claim_token = NULL,
        claimed_at = NULL,
        last_error = NULL,
        resolved_at = NULL,
        updated_at = now()
"""

#: Requeue, step 2: failed → pending (:data:`REQUEUED_ROW`), and an audit row that keeps who did it
#: and what the row had failed with. One statement, so the audit can't be missing for a requeued
#: row; guarded on ``status = 'failed'``.
REQUEUE = """
WITH previous AS (
    SELECT id, attempts, last_error
    FROM {queue}
    WHERE id = ANY(%(ids)b::bigint[]) AND status = 'failed'
    FOR UPDATE
),
requeued AS (
    UPDATE {queue} AS m
{requeued_row}    FROM previous
    WHERE m.id = previous.id
      AND m.status = 'failed'
    RETURNING m.id, previous.attempts, previous.last_error
)
INSERT INTO outbox_requeue_audit
    (queue, message_id, actor, previous_attempts, previous_error, reason)
SELECT {queue_name}, id, %(actor)s, attempts, last_error, %(reason)s::text FROM requeued
RETURNING message_id
""".replace("{requeued_row}", REQUEUED_ROW.lstrip("\n"))

#: Payload rewrite (``outbox keys rotate``), step 1: the next batch of unsent rows (pending or
#: failed) after ``after_id``, with a digest of each payload as it was read. The status test is
#: spelt as an OR, so each arm can use its partial index over the few unsent rows.
REWRITE_CANDIDATES = """
SELECT id, lane, payload::text AS payload, sha256(convert_to(payload::text, 'UTF8')) AS digest
FROM {queue}
WHERE (status = 'pending' OR status = 'failed')
  AND id > %(after_id)s
  AND (%(lane)s::text IS NULL OR lane = %(lane)s::text)
ORDER BY id
LIMIT %(limit)s
"""

#: Payload rewrite, step 2, in the same transaction: write each new payload only while the stored
#: payload is still the one step 1 read (compare-and-set on its digest). A worker's mark that
#: landed in between (a dispatched row's scrub) changed it, so the rewrite skips that row instead
#: of writing the scrubbed secrets back.
REWRITE_PAYLOADS = """
UPDATE {queue} AS m
SET payload = r.payload::jsonb,
    updated_at = now()
FROM unnest(%(ids)b::bigint[], %(digests)b::bytea[], %(payloads)b::text[])
     AS r(id, digest, payload)
WHERE m.id = r.id
  AND sha256(convert_to(m.payload::text, 'UTF8')) = r.digest
RETURNING m.id
"""

#: The columns an operator sees of a row (``outbox get``, ``outbox failed``).
_ROW_COLUMNS = """
    id, lane, status, payload::text AS payload, attempts, next_attempt_at, claim_token, claimed_at, last_error,
    idempotency_key, created_at, updated_at, resolved_at, scrubbed_at
"""

#: One row by id.
GET_ROW = "SELECT" + _ROW_COLUMNS + "FROM {queue} WHERE id = %(id)s"

#: The most recent failed rows (of one lane, or of all), newest failure first.
FAILED_ROWS = (
    "SELECT"
    + _ROW_COLUMNS
    + """FROM {queue}
WHERE status = 'failed' AND (%(lane)s::text IS NULL OR lane = %(lane)s::text)
ORDER BY resolved_at DESC, id DESC
LIMIT %(limit)s
"""
)

#: Failed rows grouped by error: what broke, how often, over what time span.
FAILED_BY_ERROR = """
SELECT last_error AS error, count(*) AS rows, min(resolved_at) AS first_failed_at,
       max(resolved_at) AS last_failed_at
FROM {queue}
WHERE status = 'failed' AND (%(lane)s::text IS NULL OR lane = %(lane)s::text)
GROUP BY last_error
ORDER BY count(*) DESC, last_error
"""

#: Stale marks per lane of this queue table (``outbox stats``): what MARK, MARK_MANY and
#: COUNT_STALE counted.
STALE_COUNTS = """
SELECT lane, stale_marks
FROM outbox_stale_marks
WHERE queue = {queue_name}
ORDER BY lane
"""

#: Rows per lane and status (``outbox stats``). Counts the whole history: an operator command, not
#: something to poll.
COUNTS = """
SELECT lane, status, count(*) AS rows
FROM {queue}
GROUP BY lane, status
ORDER BY lane, status
"""
