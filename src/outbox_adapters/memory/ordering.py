"""The per-key claims of the in-memory store, on the fake's rows.

- :func:`in_key_order`: the event outbox's (what ``claim_forms.per_key_order`` makes PostgreSQL do
  for ``outbox_event``, ADR 0020). Two guards, in id order: no row while an earlier row of its key
  is pending and not due (a retry waiting out its backoff holds its key back), and no row while
  an earlier pending row of its key is left out of this claim (the batch's limit cut it off). So
  a relay never publishes a later event of a key before an earlier one, across retries and claims.
  A claim made ahead (``ClaimRequest.ahead_of``) does not count the rows still leased by that
  batch against their keys.
- :func:`heads_of_keys`: the webhook deliveries' (what ``delivery_order.delivery_key_order`` makes
  PostgreSQL do for ``outbox_webhook_delivery``, ADR 0018): a keyed delivery is no candidate while
  an earlier one of its (endpoint, key) is pending, whatever it is doing; a keyless one always is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime

from outbox_adapters.memory.rows import Row, decoded
from outbox_core.delivery import Status
from outbox_core.messages import ClaimToken

__all__ = ["DeliveryOrder", "event_key", "heads_of_keys", "in_key_order"]

#: A delivery row's place in its order: ((endpoint id, ordering key), event id), or ``None`` for a
#: keyless delivery (ordered against nothing).
DeliveryOrder = Callable[[Row], tuple[tuple[int, str], int] | None]


def event_key(row: Row) -> str:
    """An event row's partition key (the CloudEvents ``subject`` its payload stores, as the
    ``partition_key`` column holds it on PostgreSQL); a row whose payload has none is a key of
    its own."""
    payload = decoded(row.payload)
    subject = payload.get("subject") if isinstance(payload, Mapping) else None
    return subject if isinstance(subject, str) else f"#row-{row.id}"


def in_key_order(  # noqa: PLR0913 - the claim's own parameters
    rows: Iterable[Row],
    *,
    lane: str,
    now: datetime,
    limit: int,
    key_of: Callable[[Row], str],
    ahead_of: ClaimToken | None = None,
) -> list[Row]:
    """The rows of ``lane`` a claim of ``limit`` may take at ``now``, in id order; rows still
    leased by ``ahead_of`` (the batch the worker is sending while it claims ahead) hold no key
    back."""
    pending = sorted(
        (r for r in rows if r.lane == lane and r.status is Status.PENDING), key=lambda r: r.id
    )
    blocked: set[str] = set()
    due: list[Row] = []
    ahead: set[int] = set()
    for row in pending:
        key = key_of(row)
        if row.next_attempt_at > now:
            if ahead_of is not None and row.claim_token == ahead_of:
                ahead.add(row.id)
            else:
                blocked.add(key)
        elif key not in blocked:
            due.append(row)
    taken = {r.id for r in due[:limit]}
    claimed: list[Row] = []
    left_out: set[str] = set()
    for row in pending:
        key = key_of(row)
        if row.id in taken and key not in left_out:
            claimed.append(row)
        elif row.id not in ahead:
            left_out.add(key)
    return claimed


def heads_of_keys(
    candidates: Iterable[Row], rows: Iterable[Row], order_of: DeliveryOrder
) -> list[Row]:
    """The ``candidates`` no pending row of ``rows`` precedes in their (endpoint, key)."""
    first: dict[tuple[int, str], int] = {}
    for row in rows:
        place = order_of(row) if row.status is Status.PENDING else None
        if place is not None and place[1] < first.get(place[0], place[1] + 1):
            first[place[0]] = place[1]
    heads: list[Row] = []
    for row in candidates:
        place = order_of(row)
        if place is None or first.get(place[0], place[1]) >= place[1]:
            heads.append(row)
    return heads
