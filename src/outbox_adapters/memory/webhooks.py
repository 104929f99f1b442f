"""``MemoryWebhookRepository``: the webhook model in memory, with the semantics of
:class:`outbox_adapters.postgres.webhooks.WebhookRepository`, method for method (ADR 0017).

Theory of operation
-------------------
The webhook outbox and the deliveries are :class:`~outbox_adapters.memory.MemoryStore` s the
caller passes in (lanes ``webhooks`` and ``webhook_deliveries``), so the same stores serve the
``Worker`` s and ``BornRows``, as ``PostgresStore(pool, table=...)`` does on PostgreSQL; the
repository keeps the rest (endpoints, secrets, events, which delivery is which (event,
endpoint)) and does only what is webhook-specific:

- :meth:`~MemoryWebhookRepository.fan_out_many` turns claimed outbox rows into events and their
  deliveries in ONE step: after the one yield every memory operation makes, everything is read
  and written under the stores' locks with no ``await`` between, as one transaction. Each row is
  fenced on its own by its own claim token, through the outbox store's one fenced
  compare-and-set (the dispatched mark); a refused row gets ``FanOut(marked=False)`` and nothing
  of its own is written but the stale-mark count. A marked row gets one event (a fresh
  ``msg_id``) and one delivery per enabled subscribed endpoint, *born leased*: claimed at birth by
  the in-process first attempt (``attempts = 1``, the birth token, due at ``now + birth lease``),
  unique per (event, endpoint).
- The deliveries store takes the 410 mark (``Mark.disable_endpoint``): the repository installs
  :meth:`MemoryStore.serve_endpoints` on it, so a failed mark that applied disables the delivery's
  endpoint in the mark's own step, and a stale one touches nothing.
- :meth:`~MemoryWebhookRepository.replay` is two steps, as on PostgreSQL: the clone first (an
  interrupted replay is a clone whose ``replay_completed_at`` is ``None``, visible and
  re-runnable), then its deliveries and its completion (:mod:`.webhook_replay`, with the born
  deliveries both share).

Secrets live in this object only, as :class:`~outbox_core.signing_keys.WebhookSecret` (``v1``) or
:class:`~outbox_core.signing_keys.SigningKey` (``v1a``) values (whose repr never shows a key);
nothing here logs one. There is nothing at rest to seal, so unlike the
PostgreSQL repository it takes no encryptor. Time is the deliveries store's clock (PostgreSQL: the
database's); ``available = False`` on a store makes every operation raise ``StoreUnavailable``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from datetime import datetime, timedelta

from outbox_adapters.memory.rows import Row
from outbox_adapters.memory.stamps import stamp
from outbox_adapters.memory.store import MemoryStore
from outbox_adapters.memory.webhook_endpoints import WebhookEvent
from outbox_adapters.memory.webhook_replay import MemoryReplays
from outbox_adapters.store_rules import payload_json
from outbox_adapters.webhook_keys import public_key_of, signer_of
from outbox_adapters.webhook_model import (
    DeliveryTarget,
    FanOut,
    Notice,
    WebhookRefused,
    event_body,
    event_of,
    new_msg_id,
    ordering_key_of,
    tenant_of,
)
from outbox_core.attempt_log import ATTEMPT_LOG_KEY
from outbox_core.errors import ConfigurationError
from outbox_core.messages import ClaimedRow, ClaimToken, JSONObject, Mark
from outbox_core.ports import MarkResult
from outbox_core.signing_keys import PublicKey, SigningKey

__all__ = ["MemoryWebhookRepository", "WebhookEvent"]


class MemoryWebhookRepository(MemoryReplays):
    """The webhook model over the caller's stores: ``outbox_store`` (the webhook outbox),
    ``delivery_store`` (the deliveries; it then takes 410 marks) and, for the owners' notices,
    ``email_store`` (PostgreSQL: ``outbox_message``). One store may serve several.
    ``gone_notice``: what a 410 disable enqueues for the endpoint's owner, as the PostgreSQL
    deliveries store's ``endpoint_notice`` (the health sweep takes its notice per call)."""

    def __init__(
        self,
        outbox_store: MemoryStore,
        delivery_store: MemoryStore,
        *,
        email_store: MemoryStore | None = None,
        gone_notice: Notice | None = None,
    ) -> None:
        self.outbox_store = outbox_store
        self.delivery_store = delivery_store
        self.email_store = email_store
        self.gone_notice = gone_notice
        self._clock = delivery_store._clock  # noqa: SLF001 - the "database" clock
        self._endpoints = {}
        self._secrets = {}
        self._events = {}
        self._refs = {}
        self._pairs: dict[tuple[int, int], int] = {}
        self._next = {}
        if delivery_store._disable_endpoint is not None:  # noqa: SLF001
            raise ConfigurationError(
                "this memory store already serves the deliveries of another webhook repository"
            )
        delivery_store.serve_endpoints(self._gone, self._order_of)

    # --- fan-out ---------------------------------------------------------------------------------

    async def fan_out(
        self, row: ClaimedRow, *, birth_lease: timedelta, birth_token: ClaimToken
    ) -> FanOut:
        """``fan_out_many([row])``'s one answer."""
        (fan_out,) = await self.fan_out_many(
            [row], birth_lease=birth_lease, birth_token=birth_token
        )
        return fan_out

    async def fan_out_many(
        self, rows: Sequence[ClaimedRow], *, birth_lease: timedelta, birth_token: ClaimToken
    ) -> tuple[FanOut, ...]:
        """Fan out several claimed webhook-outbox rows in ONE step: one :class:`FanOut` per row,
        in the order of ``rows``. Each row is fenced on its own by its own claim token: a refused
        row (another claim owns it, or it is resolved) gets ``FanOut(marked=False)`` and nothing
        of its own is written (only the stale-mark count); the others are unaffected. Every
        marked row gets one event (a fresh ``msg_id``) and its born-leased deliveries, all under
        ``birth_token``. Raises :class:`InvalidMessage` (nothing written) if any row is not an
        event."""
        events = [(*event_of(row), ordering_key_of(row), tenant_of(row)) for row in rows]
        await asyncio.sleep(0)
        with self._locked("fan_out") as now:
            return tuple(
                self._fan_out_one(row, event, now=now, lease=birth_lease, token=birth_token)
                for row, event in zip(rows, events, strict=True)
            )

    def _fan_out_one(
        self,
        row: ClaimedRow,
        event: tuple[str, JSONObject, str | None, str],
        *,
        now: datetime,
        lease: timedelta,
        token: ClaimToken,
    ) -> FanOut:
        mark = Mark.dispatched(row, scrub_keys=frozenset())
        if self.outbox_store._apply(mark) is not MarkResult.APPLIED:  # noqa: SLF001 - the one CAS
            return FanOut(marked=False)
        event_type, data, ordering_key, tenant = event
        made = self._add_event(
            WebhookEvent(
                id=self._new_id("event"),
                msg_id=new_msg_id(),
                event_type=event_type,
                data=payload_json(data),
                created_at=now,
                tenant=tenant,
                source_outbox_id=int(row.id),
                ordering_key=ordering_key,
            )
        )
        _ids, deliveries = self._born_deliveries(
            made, None, lease, token, trace_context=row.trace_context
        )
        return FanOut(marked=True, event_id=made.id, msg_id=made.msg_id, deliveries=deliveries)

    def _order_of(self, row: Row) -> tuple[tuple[int, str], int] | None:
        """A delivery row's place in its (endpoint, key) order; ``None``: keyless (the deliveries
        store's claim asks, under its lock)."""
        ref = self._refs.get(row.id)
        key = None if ref is None else self._events[ref[0]].ordering_key
        return None if ref is None or key is None else ((ref[1], key), ref[0])

    # --- one attempt's target ----------------------------------------------------------------------

    async def public_keys(self, endpoint_id: int) -> tuple[PublicKey, ...]:
        """The ``whpk_`` keys of a ``v1a`` endpoint's unexpired keys, newest first."""
        await asyncio.sleep(0)
        with self._locked("public_keys") as at:
            if self._endpoint(endpoint_id).scheme != "v1a":
                raise WebhookRefused(f"webhook endpoint {endpoint_id} signs v1: no public key")
            live = [
                s for s in self._secrets[endpoint_id] if s.expires_at is None or s.expires_at > at
            ]
        live.sort(key=lambda s: (s.created_at, s.id), reverse=True)
        return tuple(public_key_of(s.secret) for s in live if isinstance(s.secret, SigningKey))

    async def delivery_target(
        self, delivery_id: int, *, now: datetime | None = None
    ) -> DeliveryTarget | None:
        """What one attempt of ``delivery_id`` needs (``None``: no such delivery); ``secrets``
        holds every secret unexpired at ``now`` (default: the clock's), newest first."""
        await asyncio.sleep(0)
        with self._locked("delivery_target"):
            ref = self._refs.get(int(delivery_id))
            if ref is None:
                return None
            at = stamp(self._clock, now)
            event, endpoint = self._events[ref[0]], self._endpoints[ref[1]]
            live = [
                s for s in self._secrets[endpoint.id] if s.expires_at is None or s.expires_at > at
            ]
            live.sort(key=lambda s: (s.created_at, s.id), reverse=True)
            row = self.delivery_store._rows.get(int(delivery_id))  # noqa: SLF001
            log = _stored_log(row.payload) if row is not None else None
        return DeliveryTarget(
            delivery_id=int(delivery_id),
            event_id=event.id,
            endpoint_id=endpoint.id,
            url=endpoint.url,
            enabled=endpoint.enabled,
            secrets=tuple(signer_of(s.secret, endpoint_id=endpoint.id) for s in live),
            msg_id=event.msg_id,
            event_type=event.event_type,
            body=event_body(event.event_type, event.created_at, json.loads(event.data)),
            max_per_second=endpoint.max_per_second,
            attempt_log=log,
        )

    async def delivery_targets(
        self, delivery_ids: Sequence[int], *, now: datetime | None = None
    ) -> dict[int, DeliveryTarget]:
        """The targets of several deliveries, by delivery id; one that does not exist is left
        out (as PostgreSQL's, which reads them in one query)."""
        targets: dict[int, DeliveryTarget] = {}
        for delivery_id in delivery_ids:
            target = await self.delivery_target(delivery_id, now=now)
            if target is not None:
                targets[int(delivery_id)] = target
        return targets

    # --- what a host's test reads --------------------------------------------------------------------

    def events(self) -> list[WebhookEvent]:
        """Every event (fan-outs and replay clones), oldest first."""
        with self.delivery_store._lock:  # noqa: SLF001
            return [self._events[i] for i in sorted(self._events)]

    def delivery_refs(self) -> dict[int, tuple[int, int]]:
        """Every delivery the repository wrote: row id -> (event id, endpoint id)."""
        with self.delivery_store._lock:  # noqa: SLF001
            return dict(self._refs)


def _stored_log(payload: str) -> object:
    """A delivery row's ``payload -> 'attempt_log'`` (PostgreSQL's read): ``None`` when the
    payload is not an object or has no log."""
    try:
        stored = json.loads(payload)
    except (ValueError, RecursionError):
        return None
    return stored.get(ATTEMPT_LOG_KEY) if isinstance(stored, dict) else None
