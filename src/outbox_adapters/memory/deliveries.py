"""The in-memory store's side as a webhook deliveries table (ADR 0017): rows born claimed by a
fan-out, the 410 mark that disables a delivery's endpoint in the mark's own step, and the claim's
per-(endpoint, key) order (ADR 0018).

A base class of :class:`~outbox_adapters.memory.store.MemoryStore`, which owns the rows, the lock
and the clock; :class:`~outbox_adapters.memory.MemoryWebhookRepository` is what uses it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from datetime import timedelta

from outbox_adapters.memory.ordering import DeliveryOrder, heads_of_keys
from outbox_adapters.memory.rows import Row
from outbox_core.delivery import Status
from outbox_core.errors import ConfigurationError
from outbox_core.messages import ClaimedRow, ClaimToken, Mark
from outbox_core.ports import Clock, EnqueueResult

__all__ = ["MemoryDeliveryRows"]


class MemoryDeliveryRows:
    """What a webhook repository asks of the store of its deliveries."""

    _clock: Clock
    _lock: threading.RLock
    _rows: dict[int, Row]
    #: Set by :meth:`serve_endpoints`: what disables the endpoint of a delivery row.
    _disable_endpoint: Callable[[int, str | None], None] | None
    #: Set by :meth:`serve_endpoints`: a delivery row's place in its (endpoint, key) order.
    _order_of: DeliveryOrder | None = None
    #: MemoryStore's own steps: its insert, and the claim of one row.
    _write: Callable[..., EnqueueResult]
    _claim: Callable[..., ClaimedRow]

    def serve_endpoints(
        self, disable: Callable[[int, str | None], None], order_of: DeliveryOrder | None = None
    ) -> None:
        """Make this store the webhook deliveries' table: a failed mark asking to disable its
        endpoint (HTTP 410 Gone, ``Mark.disable_endpoint``) is then taken, and once it applied,
        ``disable(row_id, reason)`` runs under the store's lock in the mark's own step, as
        PostgreSQL's mark of ``outbox_webhook_delivery`` disables the endpoint in its transaction.
        :class:`~outbox_adapters.memory.MemoryWebhookRepository` installs it on its deliveries.
        With ``order_of``, the claim keeps per-(endpoint, key) order as PostgreSQL's claim of
        that table does: a keyed row is not taken while an earlier one of its key is pending."""
        with self._lock:
            self._disable_endpoint = disable
            self._order_of = order_of

    def _heads(self, candidates: list[Row]) -> list[Row]:
        """The claim's candidates that no pending row precedes in their (endpoint, key) (all of
        them on a store that keeps no such order). The caller holds the lock."""
        if self._order_of is None:
            return candidates
        return heads_of_keys(candidates, self._rows.values(), self._order_of)

    def _pending_key(self, place: tuple[int, str]) -> bool:
        """Whether a pending row of the (endpoint, key) ``place`` exists (the caller holds the
        lock): a delivery born now behind it must wait for the claim (PostgreSQL:
        ``BORN_DELIVERIES``)."""
        order_of = self._order_of
        return order_of is not None and any(
            row.status is Status.PENDING and (at := order_of(row)) is not None and at[0] == place
            for row in self._rows.values()
        )

    def _born(
        self,
        lane: str,
        payload: str,
        *,
        lease: timedelta,
        token: ClaimToken | None,
        trace_context: str | None,
    ) -> tuple[int, ClaimedRow | None]:
        """Write a row claimed at birth under ``token`` until ``now + lease`` (the caller holds
        the lock; PostgreSQL: ``BORN_DELIVERIES``); with no token, a row due at ``now + lease``,
        no attempt counted. Its id, and the claimed row (``None`` without a token)."""
        now = self._clock.now()
        result = self._write(
            lane, payload, key=None, not_before=now + lease, now=now, trace_context=trace_context
        )
        row = self._rows[int(result.row_id)]
        if token is None:
            return row.id, None
        return row.id, self._claim(row, token, now=now, expires=now + lease)

    def _refuse_disable(self, marks: Sequence[Mark]) -> None:
        """A store that serves no webhook endpoints refuses a mark asking to disable one, as
        PostgreSQL refuses it on a queue table without ``endpoint_id``, before anything is
        written."""
        if self._disable_endpoint is None and any(mark.disable_endpoint for mark in marks):
            raise ConfigurationError(
                "a mark asks to disable its webhook endpoint (HTTP 410), but this memory store"
                " serves no webhook endpoints; only the deliveries store of a webhook repository"
                " (MemoryWebhookRepository) or the webhook deliveries table on PostgreSQL takes"
                " such a mark"
            )
