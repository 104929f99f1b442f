"""Events, their deliveries and replays in
:class:`~outbox_adapters.memory.MemoryWebhookRepository` (a base of it), with the semantics of
PostgreSQL's ``WebhookRepository``: an event's deliveries are born once per (event, endpoint), and
:meth:`MemoryReplays.replay` is two steps, the clone first (an interrupted replay is a clone whose
``replay_completed_at`` is ``None``, visible and re-runnable), then its deliveries and its
completion.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

import attrs

from outbox_adapters.memory.endpoint_health import MemoryHealthReads
from outbox_adapters.memory.webhook_endpoints import WebhookEvent
from outbox_adapters.store_rules import payload_json
from outbox_adapters.webhook_model import (
    DELIVERY_LANE,
    Replay,
    check_replay_target,
    new_msg_id,
    receives,
    refused_disabled,
    refused_no_event,
)
from outbox_core.delivery import Status
from outbox_core.messages import ClaimedRow, ClaimToken

__all__ = ["MemoryReplays"]


class MemoryReplays(MemoryHealthReads):
    """Born deliveries and replays (a base of ``MemoryWebhookRepository``)."""

    #: (event id, endpoint id) -> its delivery row id: one delivery per pair.
    _pairs: dict[tuple[int, int], int]

    def _add_event(self, event: WebhookEvent) -> WebhookEvent:
        self._events[event.id] = event
        return event

    def _born_deliveries(
        self,
        event: WebhookEvent,
        endpoint_id: int | None,
        birth_lease: timedelta,
        birth_token: ClaimToken | None,
        *,
        trace_context: str | None = None,
    ) -> tuple[tuple[int, ...], tuple[ClaimedRow, ...]]:
        """One delivery per enabled endpoint of the event's tenant subscribed to its type (only
        ``endpoint_id`` when given) that has none yet: born leased under ``birth_token``, or, with
        no token, due at ``now + birth_lease`` for the retry lane with no attempt counted. A keyed
        delivery behind a pending one of its (endpoint, key) is born waiting: due now, unclaimed,
        for the keyed claim to hand out in turn (ADR 0018)."""
        ids: list[int] = []
        claimed: list[ClaimedRow] = []
        for endpoint in sorted(self._endpoints.values(), key=lambda e: e.id):
            pair = (event.id, endpoint.id)
            if (
                not endpoint.enabled
                or endpoint.tenant != event.tenant
                or not receives(endpoint.event_types, event.event_type)
                or endpoint_id not in (None, endpoint.id)
                or pair in self._pairs
            ):
                continue
            payload = payload_json({"event_id": event.id, "endpoint_id": endpoint.id})
            waits = event.ordering_key is not None and self.delivery_store._pending_key(  # noqa: SLF001
                (endpoint.id, event.ordering_key)
            )
            delivery_id, row = self.delivery_store._born(  # noqa: SLF001 - the store's own package
                DELIVERY_LANE,
                payload,
                lease=timedelta(0) if waits else birth_lease,
                token=None if waits else birth_token,
                trace_context=trace_context,
            )
            self._refs[delivery_id] = pair
            self._pairs[pair] = delivery_id
            ids.append(delivery_id)
            if row is not None:
                claimed.append(row)
        return tuple(ids), tuple(claimed)

    # --- replay ------------------------------------------------------------------------------------

    async def replay(
        self,
        event_id: int,
        *,
        endpoint_id: int | None = None,
        birth_lease: timedelta,
        birth_token: ClaimToken | None,
    ) -> Replay:
        """Replay ``event_id`` to ``endpoint_id`` (or to every enabled endpoint subscribed to its
        type), as ``WebhookRepository.replay``: the clone first, then its deliveries (born leased
        under ``birth_token``; due rows for the retry lane with ``None``) and its completion.
        Re-running a replay interrupted in between completes its open clone. Refused
        (:class:`WebhookRefused`, nothing written) for an unknown event, an unknown or disabled
        endpoint, an endpoint not subscribed to the type, or no endpoint to send to."""
        await asyncio.sleep(0)
        with self._locked("replay") as now:
            source = self._events.get(event_id)
            if source is None:
                raise refused_no_event(event_id)
            check_replay_target(
                source.event_type, source.tenant, endpoint_id, list(self._endpoints.values())
            )
            clone = next(
                (
                    e
                    for e in sorted(self._events.values(), key=lambda e: e.id)
                    if e.replay_of == event_id
                    and e.replay_scope == endpoint_id
                    and e.replay_completed_at is None
                ),
                None,
            )
            resumed = clone is not None
            if clone is None:
                clone = self._add_event(
                    attrs.evolve(
                        source,
                        id=self._new_id("event"),
                        msg_id=new_msg_id(),
                        created_at=now,
                        source_outbox_id=None,
                        replay_of=event_id,
                        replay_scope=endpoint_id,
                        replay_completed_at=None,
                    )
                )
        ids, deliveries = await self._complete_replay(clone.id, birth_lease, birth_token)
        return Replay(
            event_id=clone.id,
            replay_of=event_id,
            msg_id=clone.msg_id,
            endpoint_id=endpoint_id,
            delivery_ids=ids,
            deliveries=deliveries,
            resumed=resumed,
        )

    async def _complete_replay(
        self, clone_id: int, birth_lease: timedelta, birth_token: ClaimToken | None
    ) -> tuple[tuple[int, ...], tuple[ClaimedRow, ...]]:
        """The replay's second step: the clone's deliveries and its completion, at once."""
        await asyncio.sleep(0)
        with self._locked("replay") as now:
            clone = self._events[clone_id]
            if clone.replay_completed_at is not None:
                return (), ()
            made = self._born_deliveries(clone, clone.replay_scope, birth_lease, birth_token)
            self._events[clone_id] = attrs.evolve(clone, replay_completed_at=now)
        return made

    async def replay_failed(  # noqa: PLR0913 - keyword-only filters of one replay
        self,
        *,
        since: datetime,
        before: datetime | None = None,
        endpoint_id: int | None = None,
        birth_lease: timedelta,
        birth_token: ClaimToken | None,
        tenant: str | None = None,
    ) -> list[Replay]:
        """Replay every delivery that failed in ``[since, before)`` (to ``endpoint_id`` only, when
        given; to ``tenant``'s endpoints only, when given), one replay per (event, endpoint); deliveries to a disabled endpoint are left
        alone; a failure a completed replay already covered is not replayed again."""
        await asyncio.sleep(0)
        with self._locked("replay_failed"):
            if endpoint_id is not None and not self._endpoint(endpoint_id).enabled:
                raise refused_disabled(endpoint_id, None, replay_failed=True)
            failed = sorted(
                (
                    (row.resolved_at, row.id, self._refs[row.id])
                    for row, to in self._delivery_rows()
                    if to is not None
                    and endpoint_id in (None, to)
                    and row.status is Status.FAILED
                    and row.resolved_at is not None
                    and since <= row.resolved_at
                    and (before is None or row.resolved_at < before)
                    and self._endpoints[to].enabled
                    and tenant in (None, self._endpoints[to].tenant)
                ),
            )
            pairs = [pair for at, _id, pair in failed if not self._replayed(pair, at)]
        return [
            await self.replay(
                event, endpoint_id=endpoint, birth_lease=birth_lease, birth_token=birth_token
            )
            for event, endpoint in dict.fromkeys(pairs)
        ]

    def _replayed(self, pair: tuple[int, int], failed_at: datetime) -> bool:
        """Whether a replay of the pair's event to its endpoint completed after ``failed_at``."""
        event_id, endpoint_id = pair
        return any(
            e.replay_of == event_id
            and e.replay_scope == endpoint_id
            and e.replay_completed_at is not None
            and e.replay_completed_at >= failed_at
            for e in self._events.values()
        )
