"""The webhook deliveries' claim in per-(endpoint, key) order (ADR 0018).

The store claims the deliveries table with the one ``CLAIM`` template of :mod:`.statements`
(rendered for the table, widened by the legacy NULL-due branch); :func:`delivery_key_order` adds
one guard to it, at render time, so every mutant of ``CLAIM`` reaches this table too and no claim
is copied. The guard is read when the store runs the claim (the mutation matrix swaps it).
"""

from __future__ import annotations

import functools

__all__ = ["EARLIER_DELIVERY_PENDING", "delivery_key_order"]

#: The line of ``CLAIM`` that the guard follows.
_PENDING_TEST = "      AND status = 'pending'\n"

#: The keyed guard, added to the claim's ``due`` CTE: a delivery with an ordering key is a
#: candidate only if no delivery of an EARLIER event (smaller ``event_id``) to the same endpoint
#: with the same key is pending, whatever it is doing: claimed (born leased to a first attempt or
#: leased by a claim), waiting for a retry, or due but locked by a concurrent claim (its committed
#: status is pending all along, so the guard sees it). Only the head of each (endpoint, key) is
#: ever claimable, so one claim, and two concurrent ones, hold at most one delivery of it. A
#: keyless delivery stops at ``ordering_key IS NULL``: the subquery is never run for it.
EARLIER_DELIVERY_PENDING = """      AND (ordering_key IS NULL OR NOT EXISTS (
          SELECT FROM {queue} AS earlier
          WHERE earlier.endpoint_id = {queue}.endpoint_id
            AND earlier.ordering_key = {queue}.ordering_key
            AND earlier.event_id < {queue}.event_id
            AND earlier.status = 'pending'
      ))
"""


def delivery_key_order(claim: str) -> str:
    """``claim`` (the ``CLAIM`` template as the store reads it, mutants included, with the legacy
    NULL-due branch or not) for the webhook deliveries table (a queue table with ``endpoint_id``,
    ``event_id`` and ``ordering_key``): a delivery with an ordering key is not taken while an
    earlier delivery of the same (endpoint, key) is pending.

    The order is the claim's own (due time, then id); only the candidates change, so a keyless
    delivery is claimed as before, and other tables' claims are unchanged.
    """
    return _guarded(claim, EARLIER_DELIVERY_PENDING)


@functools.lru_cache(maxsize=16)
def _guarded(claim: str, guard: str) -> str:
    if _PENDING_TEST not in claim:
        msg = "the CLAIM template lost its status line; delivery_key_order can't extend it"
        raise LookupError(msg)
    return claim.replace(_PENDING_TEST, _PENDING_TEST + guard, 1)
