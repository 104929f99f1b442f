"""The SQL of the webhook host API (:mod:`.tenants`): every statement that reads or changes an
endpoint, its deliveries or its events names the tenant in its WHERE clause, so a tenant's id can
only ever reach its own rows. The statements the API shares with the repository (secrets,
disable, enable, replay's clone and deliveries) are :mod:`.statements`'.
"""

from __future__ import annotations

from outbox_adapters.postgres.webhooks.statements import ENDPOINT_COLUMNS

__all__ = [
    "DELETE_ENDPOINT",
    "DELIVERY_VIEWS",
    "HAD_DELIVERY",
    "INSERT_DUE_DELIVERY",
    "INSERT_TEST_EVENT",
    "LOCK_TENANT_ENDPOINT",
    "TENANT_ENDPOINT",
    "TENANT_EVENT",
    "UPDATE_ENDPOINT",
    "WAKE_DELIVERIES",
]

#: One endpoint of the tenant (none: absent, or another tenant's; the two look alike).
TENANT_ENDPOINT = f"""
SELECT {ENDPOINT_COLUMNS}
FROM outbox_webhook_endpoint
WHERE id = %(id)s AND tenant = %(tenant)s
"""

#: The same, locked for a change in the caller's transaction.
LOCK_TENANT_ENDPOINT = TENANT_ENDPOINT + "FOR UPDATE\n"

#: One event of the tenant, locked (a replay reads its source).
TENANT_EVENT = """
SELECT id, msg_id, event_type, tenant
FROM outbox_webhook_event
WHERE id = %(id)s AND tenant = %(tenant)s
FOR UPDATE
"""

#: Change what was given (each ``set_*`` flag says whether its value is new); the row is locked.
UPDATE_ENDPOINT = f"""
UPDATE outbox_webhook_endpoint
SET url = CASE WHEN %(set_url)s THEN %(url)s::text ELSE url END,
    event_types = CASE WHEN %(set_event_types)s THEN %(event_types)s::text[] ELSE event_types END,
    description = CASE WHEN %(set_description)s THEN %(description)s::text ELSE description END,
    max_per_second = CASE WHEN %(set_max_per_second)s THEN %(max_per_second)s::integer
                          ELSE max_per_second END,
    updated_at = now()
WHERE id = %(id)s AND tenant = %(tenant)s
RETURNING {ENDPOINT_COLUMNS}
"""

#: An endpoint and everything that is only its: its deliveries and secrets (the events stay: other
#: endpoints may have deliveries of them). A delivery a worker holds is gone under it: its mark
#: finds nothing (a stale mark), and nothing more is sent.
DELETE_ENDPOINT = """
WITH gone AS (
    DELETE FROM outbox_webhook_endpoint
    WHERE id = %(id)s AND tenant = %(tenant)s
    RETURNING id
),
deliveries AS (
    DELETE FROM outbox_webhook_delivery WHERE endpoint_id IN (SELECT id FROM gone)
),
secrets AS (
    DELETE FROM outbox_webhook_secret WHERE endpoint_id IN (SELECT id FROM gone)
)
SELECT id FROM gone
"""

#: An endpoint's deliveries, newest first, with their event: what the tenant sees of each (the
#: last attempt's status code and the stored response snippet, the attempts so far, the attempt
#: log (NULL for a row written before it), when the next one is due while pending).
DELIVERY_VIEWS = """
SELECT d.id, d.event_id, ev.msg_id, ev.event_type, d.status, d.attempts,
       d.payload ->> 'last_status' AS last_status, d.payload ->> 'response' AS response,
       d.last_error, d.created_at, d.updated_at, d.payload -> 'attempt_log' AS attempt_log,
       CASE WHEN d.status = 'pending' THEN d.next_attempt_at END AS next_attempt_at,
       ev.data::text AS data
FROM outbox_webhook_delivery AS d
JOIN outbox_webhook_endpoint AS e ON e.id = d.endpoint_id
JOIN outbox_webhook_event AS ev ON ev.id = d.event_id
WHERE d.endpoint_id = %(endpoint_id)s
  AND e.tenant = %(tenant)s
  AND d.lane = %(lane)s
  AND (%(status)s::text IS NULL OR d.status = %(status)s::text)
  AND (%(before_id)s::bigint IS NULL OR d.id < %(before_id)s::bigint)
ORDER BY d.id DESC
LIMIT %(limit)s
"""

#: A test event of the tenant: an event of its own (a replay of nothing).
INSERT_TEST_EVENT = """
INSERT INTO outbox_webhook_event (msg_id, event_type, data, tenant)
VALUES (%(msg_id)s, %(event_type)s, %(data)s::jsonb, %(tenant)s)
RETURNING id
"""

#: One delivery of an event to the endpoint asked for, whatever it subscribes to (a test event; a
#: replay to an endpoint that had the event): due now for the delivery lane (no attempt counted,
#: no claim), with the event's ordering key (the keyed claim keeps its order).
INSERT_DUE_DELIVERY = """
INSERT INTO outbox_webhook_delivery
    (lane, payload, event_id, endpoint_id, next_attempt_at, ordering_key)
VALUES (%(lane)s, jsonb_build_object('event_id', %(event_id)s::bigint,
                                     'endpoint_id', %(endpoint_id)s::bigint),
        %(event_id)s, %(endpoint_id)s, now(), %(ordering_key)s)
ON CONFLICT (event_id, endpoint_id) DO NOTHING
RETURNING id
"""

#: Whether an event had a delivery to an endpoint (a replay there needs no subscription).
HAD_DELIVERY = """
SELECT id FROM outbox_webhook_delivery
WHERE event_id = %(event_id)s AND endpoint_id = %(endpoint_id)s
"""

#: Wake the delivery lane's workers when the caller commits (ADR 0011): a notification is part
#: of the transaction, dropped if it rolls back.
WAKE_DELIVERIES = "SELECT pg_notify('outbox_wakeup', %(lane)s)"
