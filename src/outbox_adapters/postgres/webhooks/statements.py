"""The webhook repository's SQL, one name each, read at call time (the mutation matrix swaps them).

The tables have fixed names (:mod:`.tables`); the generic queue statements (the outbox row's fenced
mark, the deliveries' claim and marks) are :mod:`outbox_adapters.postgres.statements`' templates,
never copies. ``now`` is optional where a test needs to move time: ``coalesce(%(now)s, now())``.
The operator's report on the deliveries is :mod:`.report_statements`.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "BORN_DELIVERIES",
    "CLONE_EVENT",
    "COMPLETE_REPLAY",
    "DELIVERY_TARGET",
    "DISABLE_ENDPOINT",
    "ENABLE_ENDPOINT",
    "ENDPOINT",
    "ENDPOINTS",
    "ENDPOINT_HEALTH",
    "EVENT",
    "EXPIRE_SECRETS",
    "FAILED_TO_REPLAY",
    "INSERT_ENDPOINT",
    "INSERT_EVENTS",
    "INSERT_SECRET",
    "LIVE_SECRETS",
    "LOCK_ENDPOINT",
    "MISSED_EVENTS",
    "OPEN_REPLAY",
    "UNHEALTHY_ENDPOINTS",
]

#: What every endpoint read returns (``Endpoint.from_record``'s fields).
ENDPOINT_COLUMNS: Final = """id, tenant, url, event_types, enabled, owner_email, disabled_reason,
       disabled_at, created_at, updated_at, coalesce(scheme, 'v1') AS scheme, max_per_second,
       description"""


def subscribed(event_types: str, event_type: str) -> str:
    """SQL true when a subscription array ``event_types`` takes the text ``event_type`` (both SQL
    expressions): listed exactly, ``*``, or under a wildcard's prefix (``invoice.*`` takes
    ``invoice.paid``). The twin of :func:`outbox_adapters.webhook_scope.receives`."""
    return (
        f"EXISTS (SELECT FROM unnest({event_types}) AS sub(t) WHERE sub.t = {event_type}"
        f" OR sub.t = '*' OR (right(sub.t, 2) = '.*'"
        f" AND starts_with({event_type}, left(sub.t, -1))))"
    )


# --- fan-out and replay ---------------------------------------------------------------------------

#: The events of a fan-out, one per outbox row whose fenced mark applied, in the fan-out's
#: transaction (after ``MARK_MANY``); ``source_outbox_id`` is unique, so an outbox row can never
#: have two events, and an event's id follows its row's order in the batch.
INSERT_EVENTS = """
INSERT INTO outbox_webhook_event
    (msg_id, event_type, data, source_outbox_id, ordering_key, tenant)
SELECT v.msg_id, v.event_type, v.data::jsonb, v.source_outbox_id, v.ordering_key, v.tenant
FROM unnest(%(msg_ids)b::text[], %(event_types)b::text[], %(datas)b::text[],
            %(source_outbox_ids)b::bigint[], %(ordering_keys)b::text[], %(tenants)b::text[])
     WITH ORDINALITY
     AS v(msg_id, event_type, data, source_outbox_id, ordering_key, tenant, position)
ORDER BY v.position
RETURNING id, source_outbox_id, created_at
"""

#: Born-leased deliveries of one or more events (a fan-out's batch, or one replay's clone): one per
#: event and enabled endpoint OF THE EVENT'S TENANT subscribed to the event's type (:func:`subscribed`;
#: or only ``endpoint_id`` when given, still of that tenant),
#: already claimed by the in-process first attempt: attempts = 1, the birth token, and a due time
#: of now + the BIRTH lease (never NULL: a NULL due time is what the legacy branch of the claim
#: takes at once, so the retry worker would race the first attempt; never now: due at once, the
#: same race). The retry worker's claim can't take the row before the birth lease runs out. A
#: (event, endpoint) pair that has a delivery already gets no second one.
#: With no token (a replay from the CLI, where no process makes a first attempt) the rows are plain
#: due rows for the retry lane instead: no attempt counted, no claim, due after ``birth_lease`` (0).
#: A keyed delivery that must WAIT (ADR 0018: an earlier event of its key, in this batch or
#: already pending, goes to the same endpoint) is born unclaimed and due now, like the no-token
#: rows: the keyed claim (``delivery_order``) hands it out once the deliveries before it are
#: resolved; no first attempt is made for it here. A keyless delivery never waits (``CASE`` stops
#: at the NULL key: neither subquery runs).
#: Each delivery carries the webhook event's enqueue trace context (ADR 0028; NULL for a replay).
BORN_DELIVERIES = f"""
INSERT INTO outbox_webhook_delivery
    (lane, payload, attempts, next_attempt_at, claim_token, claimed_at, event_id, endpoint_id,
     trace_context, ordering_key)
SELECT %(lane)s,
       jsonb_build_object('event_id', c.event_id, 'endpoint_id', c.endpoint_id),
       CASE WHEN %(token)s::text IS NULL OR c.waits THEN 0 ELSE 1 END,
       CASE WHEN c.waits THEN now()
            ELSE now() + %(birth_lease)s::interval END,
       CASE WHEN c.waits THEN NULL ELSE %(token)s::text END,
       CASE WHEN %(token)s::text IS NULL OR c.waits THEN NULL ELSE now() END,
       c.event_id,
       c.endpoint_id,
       c.trace_context,
       c.ordering_key
FROM (
    SELECT v.event_id, e.id AS endpoint_id, v.trace_context, v.ordering_key,
           CASE WHEN v.ordering_key IS NULL THEN false
                ELSE EXISTS (
                         SELECT FROM unnest(%(event_ids)b::bigint[], %(event_types)b::text[],
                                            %(ordering_keys)b::text[], %(tenants)b::text[])
                                     AS o(event_id, event_type, ordering_key, tenant)
                         WHERE o.ordering_key = v.ordering_key
                           AND o.event_id < v.event_id
                           AND o.tenant = e.tenant
                           AND {subscribed("e.event_types", "o.event_type")}
                     )
                     OR EXISTS (
                         SELECT FROM outbox_webhook_delivery AS d
                         WHERE d.endpoint_id = e.id
                           AND d.ordering_key = v.ordering_key
                           AND d.status = 'pending'
                     )
           END AS waits
    FROM unnest(%(event_ids)b::bigint[], %(event_types)b::text[], %(trace_contexts)b::text[],
                %(ordering_keys)b::text[], %(tenants)b::text[])
         AS v(event_id, event_type, trace_context, ordering_key, tenant)
    JOIN outbox_webhook_endpoint AS e
      ON e.tenant = v.tenant
     AND e.enabled
     AND {subscribed("e.event_types", "v.event_type")}
     AND (%(endpoint_id)s::bigint IS NULL OR e.id = %(endpoint_id)s::bigint)
) AS c
ORDER BY c.event_id, c.endpoint_id
ON CONFLICT (event_id, endpoint_id) DO NOTHING
RETURNING id, lane, payload::text AS payload, attempts, next_attempt_at AS lease_expires_at,
          created_at, trace_context, event_id, claim_token IS NOT NULL AS born
"""

#: One event by id, locked (a replay reads its source; completing a replay locks the clone).
EVENT = """
SELECT id, msg_id, event_type, data::text AS data, replay_of, replay_scope, replay_completed_at,
       created_at, ordering_key, tenant
FROM outbox_webhook_event
WHERE id = %(id)s
FOR UPDATE
"""

#: A replay's clone not completed yet (an interrupted replay), for the same source and scope.
OPEN_REPLAY = """
SELECT id, msg_id, event_type, data::text AS data, created_at, ordering_key, tenant
FROM outbox_webhook_event
WHERE replay_of = %(replay_of)s
  AND replay_scope = %(scope)s::jsonb
  AND replay_completed_at IS NULL
ORDER BY id
LIMIT 1
FOR UPDATE
"""

#: Replay, step 1 (its own transaction): the clone, committed before any delivery exists, so an
#: interrupted replay is visible (``replay_completed_at`` NULL) and can be completed. The clone
#: keeps its source's ordering key (a later event of the key, ADR 0018) and its tenant.
CLONE_EVENT = """
INSERT INTO outbox_webhook_event
    (msg_id, event_type, data, replay_of, replay_scope, ordering_key, tenant)
SELECT %(msg_id)s, event_type, data, id, %(scope)s::jsonb, ordering_key, tenant
FROM outbox_webhook_event
WHERE id = %(replay_of)s
RETURNING id, msg_id, event_type, data::text AS data, created_at, ordering_key, tenant
"""

#: Replay, step 2 (with the clone's born deliveries, one transaction): the replay is done.
COMPLETE_REPLAY = """
UPDATE outbox_webhook_event SET replay_completed_at = now()
WHERE id = %(id)s AND replay_completed_at IS NULL
"""

#: The failed deliveries of a time range (by when they failed) still worth replaying: endpoint
#: enabled, and no completed replay of that event to that endpoint made since the failure.
FAILED_TO_REPLAY = """
SELECT d.event_id, d.endpoint_id
FROM outbox_webhook_delivery AS d
JOIN outbox_webhook_endpoint AS e ON e.id = d.endpoint_id
WHERE d.lane = %(lane)s
  AND d.status = 'failed'
  AND d.resolved_at >= %(since)s::timestamptz
  AND (%(before)s::timestamptz IS NULL OR d.resolved_at < %(before)s::timestamptz)
  AND (%(endpoint_id)s::bigint IS NULL OR d.endpoint_id = %(endpoint_id)s::bigint)
  AND (%(tenant)s::text IS NULL OR e.tenant = %(tenant)s::text)
  AND e.enabled
  AND NOT EXISTS (
      SELECT FROM outbox_webhook_event AS c
      WHERE c.replay_of = d.event_id
        AND c.replay_scope = jsonb_build_object('endpoint_id', d.endpoint_id)
        AND c.replay_completed_at >= d.resolved_at
  )
ORDER BY d.resolved_at, d.id
"""

#: Attempts' targets: each delivery (with its attempt log), its endpoint, its event and every
#: unexpired secret (one
#: delivery for a retry, the deliveries a fan-out round just wrote for their first attempts).
DELIVERY_TARGET = """
SELECT d.id, d.event_id, d.endpoint_id, e.url, e.enabled, ev.msg_id, ev.event_type,
       ev.data::text AS data, ev.created_at, coalesce(e.scheme, 'v1') AS scheme,
       e.max_per_second, d.payload -> 'attempt_log' AS attempt_log,
       ARRAY(
           SELECT s.secret FROM outbox_webhook_secret AS s
           WHERE s.endpoint_id = e.id
             AND (s.expires_at IS NULL OR s.expires_at > coalesce(%(now)s::timestamptz, now()))
           ORDER BY s.created_at DESC, s.id DESC
       ) AS secrets
FROM outbox_webhook_delivery AS d
JOIN outbox_webhook_endpoint AS e ON e.id = d.endpoint_id
JOIN outbox_webhook_event AS ev ON ev.id = d.event_id
WHERE d.id = ANY(%(ids)b::bigint[])
"""

# --- endpoints ------------------------------------------------------------------------------------

INSERT_ENDPOINT = f"""
INSERT INTO outbox_webhook_endpoint
    (tenant, url, event_types, owner_email, scheme, max_per_second, description)
VALUES (%(tenant)s, %(url)s, %(event_types)s::text[], %(owner_email)s, %(scheme)s,
        %(max_per_second)s, %(description)s)
RETURNING {ENDPOINT_COLUMNS}
"""

INSERT_SECRET = """
INSERT INTO outbox_webhook_secret (endpoint_id, secret, expires_at)
VALUES (%(endpoint_id)s, %(secret)s, NULL)
"""  # noqa: S105 - SQL that stores a secret, not a secret

#: An endpoint's unexpired secrets, newest first (their public keys, for a v1a endpoint).
LIVE_SECRETS = """
SELECT s.secret FROM outbox_webhook_secret AS s
WHERE s.endpoint_id = %(endpoint_id)s
  AND (s.expires_at IS NULL OR s.expires_at > coalesce(%(now)s::timestamptz, now()))
ORDER BY s.created_at DESC, s.id DESC
"""

#: Rotation: every secret still live past the overlap now expires at the end of the overlap.
EXPIRE_SECRETS = """
UPDATE outbox_webhook_secret
SET expires_at = coalesce(%(now)s::timestamptz, now()) + %(overlap)s::interval
WHERE endpoint_id = %(endpoint_id)s
  AND (expires_at IS NULL
       OR expires_at > coalesce(%(now)s::timestamptz, now()) + %(overlap)s::interval)
"""

ENDPOINT = f"""
SELECT {ENDPOINT_COLUMNS}
FROM outbox_webhook_endpoint
WHERE id = %(id)s
"""

LOCK_ENDPOINT = f"""
SELECT {ENDPOINT_COLUMNS}
FROM outbox_webhook_endpoint
WHERE id = %(id)s
FOR UPDATE
"""

ENDPOINTS = f"""
SELECT {ENDPOINT_COLUMNS}
FROM outbox_webhook_endpoint
WHERE %(tenant)s::text IS NULL OR tenant = %(tenant)s::text
ORDER BY id
"""

DISABLE_ENDPOINT = f"""
UPDATE outbox_webhook_endpoint
SET enabled = false, disabled_reason = %(reason)s, disabled_at = coalesce(%(now)s::timestamptz, now()),
    updated_at = now()
WHERE id = %(id)s AND enabled
RETURNING {ENDPOINT_COLUMNS}
"""

ENABLE_ENDPOINT = f"""
UPDATE outbox_webhook_endpoint
SET enabled = true, disabled_reason = NULL, disabled_at = NULL, updated_at = now()
WHERE id = %(id)s
RETURNING {ENDPOINT_COLUMNS}
"""

#: The events of an endpoint's tenant and types created since it was disabled that have no
#: delivery to it.
MISSED_EVENTS = f"""
SELECT ev.id
FROM outbox_webhook_event AS ev
WHERE ev.tenant = %(tenant)s
  AND {subscribed("%(event_types)s::text[]", "ev.event_type")}
  AND ev.replay_of IS NULL
  AND (
      -- made while it was disabled: the fan-out left it out
      (ev.created_at >= %(since)s::timestamptz AND NOT EXISTS (
          SELECT FROM outbox_webhook_delivery AS d
          WHERE d.event_id = ev.id AND d.endpoint_id = %(endpoint_id)s
      ))
      -- or made before, and its delivery skipped because the endpoint was disabled by then
      OR EXISTS (
          SELECT FROM outbox_webhook_delivery AS d
          WHERE d.event_id = ev.id AND d.endpoint_id = %(endpoint_id)s AND d.status = 'skipped'
            AND d.resolved_at >= %(since)s::timestamptz
      )
  )
ORDER BY ev.id
"""

#: Endpoint health (ADR 0018): enabled endpoints failing without a success for the whole window. An
#: endpoint qualifies when it has had no successful delivery since ``now - window``, its current
#: run of failing deliveries (failed, or pending after a failed attempt, created after its last
#: success) began at or before ``now - window``, and it failed again within the window (so an
#: endpoint merely idle since an old failure is left alone). Locked, in the disabling transaction.
#: Attempts that failed on our side, not the receiver's (``not_theirs``: a signing secret our
#: keys can't open, ADR 0030), do not count: a key mistake must not disable an endpoint.
UNHEALTHY_ENDPOINTS = f"""
WITH health AS (
    SELECT d.endpoint_id,
           max(d.resolved_at) FILTER (WHERE d.status = 'dispatched') AS last_success,
           max(d.updated_at) FILTER (
               WHERE d.status IN ('pending', 'failed') AND d.last_error IS NOT NULL
                 AND d.last_error NOT LIKE %(not_theirs)s
           ) AS last_failure
    FROM outbox_webhook_delivery AS d
    WHERE d.lane = %(lane)s
    GROUP BY d.endpoint_id
),
streak AS (
    SELECT d.endpoint_id, min(d.created_at) AS failing_since
    FROM outbox_webhook_delivery AS d
    JOIN health AS h ON h.endpoint_id = d.endpoint_id
    WHERE d.lane = %(lane)s
      AND d.status IN ('pending', 'failed')
      AND d.last_error IS NOT NULL
      AND d.last_error NOT LIKE %(not_theirs)s
      AND d.created_at > coalesce(h.last_success, '-infinity'::timestamptz)
    GROUP BY d.endpoint_id
)
SELECT {ENDPOINT_COLUMNS}
FROM outbox_webhook_endpoint
WHERE enabled
  AND id IN (
      SELECT h.endpoint_id
      FROM health AS h JOIN streak AS s ON s.endpoint_id = h.endpoint_id
      WHERE s.failing_since <= coalesce(%(now)s::timestamptz, now()) - %(window)s::interval
        AND (h.last_success IS NULL
             OR h.last_success <= coalesce(%(now)s::timestamptz, now()) - %(window)s::interval)
        AND h.last_failure > coalesce(%(now)s::timestamptz, now()) - %(window)s::interval
  )
ORDER BY id
FOR UPDATE
"""

#: One endpoint's health (``endpoint_health``): its state, when its last delivery succeeded and
#: when its last one failed (by resolution time), and its failed deliveries resolved after the
#: last success: the current failure streak. No row: no such endpoint.
ENDPOINT_HEALTH = """
SELECT e.id AS endpoint_id, e.enabled, e.disabled_reason, e.disabled_at,
       h.last_success_at, h.last_failure_at,
       (SELECT count(*) FROM outbox_webhook_delivery AS d
        WHERE d.endpoint_id = e.id
          AND d.lane = %(lane)s
          AND d.status = 'failed'
          AND d.resolved_at > coalesce(h.last_success_at, '-infinity'::timestamptz)
       ) AS failure_streak
FROM outbox_webhook_endpoint AS e
CROSS JOIN LATERAL (
    SELECT max(d.resolved_at) FILTER (WHERE d.status = 'dispatched') AS last_success_at,
           max(d.resolved_at) FILTER (WHERE d.status = 'failed') AS last_failure_at
    FROM outbox_webhook_delivery AS d
    WHERE d.endpoint_id = e.id AND d.lane = %(lane)s
) AS h
WHERE e.id = %(id)s
"""
