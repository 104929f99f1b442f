"""The SQL of the operator's report on webhook deliveries (``EndpointOps.deliveries``): the
deliveries grouped by status and error, and counted per status, under the same filters (lane,
status, endpoint, tenant). Read by :mod:`.endpoints`.
"""

from __future__ import annotations

from typing import Final

__all__ = ["DELIVERY_COUNTS", "DELIVERY_GROUPS"]

#: The deliveries both read: the lane's, of one status, endpoint or tenant when given.
_DELIVERIES: Final = """FROM outbox_webhook_delivery AS d
WHERE d.lane = %(lane)s
  AND (%(status)s::text IS NULL OR d.status = %(status)s::text)
  AND (%(endpoint_id)s::bigint IS NULL OR d.endpoint_id = %(endpoint_id)s::bigint)
  AND (%(tenant)s::text IS NULL
       OR d.endpoint_id IN (SELECT id FROM outbox_webhook_endpoint WHERE tenant = %(tenant)s::text))
"""

#: Deliveries grouped by status and error, largest group first; the last status code and response
#: snippet come from the group's most recent delivery (the payload keys the fenced marks patch in).
DELIVERY_GROUPS: Final = f"""
SELECT d.status, d.last_error AS error, count(*) AS deliveries,
       min(d.updated_at) AS first_at, max(d.updated_at) AS last_at,
       (array_agg(d.payload ->> 'last_status' ORDER BY d.updated_at DESC, d.id DESC))[1]
           AS last_status,
       (array_agg(d.payload ->> 'response' ORDER BY d.updated_at DESC, d.id DESC))[1]
           AS response,
       array_agg(DISTINCT d.endpoint_id ORDER BY d.endpoint_id) AS endpoint_ids
{_DELIVERIES}GROUP BY d.status, d.last_error
ORDER BY count(*) DESC, d.status, d.last_error NULLS FIRST
LIMIT %(limit)s
"""

#: Deliveries per status, over the same filters.
DELIVERY_COUNTS: Final = f"""
SELECT d.status, count(*) AS deliveries
{_DELIVERIES}GROUP BY d.status
"""
