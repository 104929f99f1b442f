"""The endpoint side of :class:`~outbox_adapters.memory.MemoryWebhookRepository`: registration,
secrets and their rotation, disable/enable (with what an endpoint missed), endpoint health with
the owner's notice, and the operator's delivery report, with the semantics of
``postgres.webhooks.endpoints`` (the contract suite runs the same cases against both).

The repository's state (endpoints, secrets, events, which delivery row is which (event,
endpoint)) is guarded by the deliveries store's lock: a 410 mark disables its endpoint under that
lock in the mark's own step (``MemoryStore.serve_endpoints``), and every operation here takes it
too. An operation that touches several stores takes their locks in one fixed order
(:meth:`MemoryEndpointOps._locked`), once, after the one yield ``MemoryStore`` makes before an
operation: nothing else runs between its reads and its writes, as in one transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta

import attrs

from outbox_adapters.memory.delivery_report import delivery_report
from outbox_adapters.memory.rows import Row
from outbox_adapters.memory.stamps import stamp
from outbox_adapters.memory.store import MemoryStore
from outbox_adapters.store_rules import payload_json
from outbox_adapters.webhook_keys import check_rotation, parse_signing_secret, scheme_of
from outbox_adapters.webhook_model import (
    DEFAULT_HEALTH_WINDOW,
    DEFAULT_SECRET_OVERLAP,
    DELIVERY_LANE,
    DeliveryReport,
    Endpoint,
    Missed,
    Notice,
    check_description,
    check_endpoint_url,
    check_event_types,
    check_max_per_second,
    check_overlap,
    check_owner,
    check_reason,
    check_tenant,
    check_window,
    health_reason,
    owner_message,
    receives,
    refused_no_endpoint,
)
from outbox_core.delivery import Status
from outbox_core.errors import ConfigurationError
from outbox_core.messages import NewMessage
from outbox_core.ports import Clock
from outbox_core.webhook_secrets import StoredKey

__all__ = ["MemoryEndpointOps", "WebhookEvent"]

_log = logging.getLogger(__name__)
_FAILING = (Status.PENDING, Status.FAILED)


@attrs.frozen
class WebhookEvent:
    """One event (PostgreSQL: a row of ``outbox_webhook_event``), as the repository holds it."""

    id: int
    #: ``msg_`` + 32 hex digits: the ``webhook-id`` of every delivery of this event.
    msg_id: str
    event_type: str
    #: The data as JSON text (as ``jsonb`` keeps it: a copy, not the producer's object).
    data: str
    created_at: datetime
    #: The tenant it belongs to: its deliveries go to that tenant's endpoints only.
    tenant: str
    #: The webhook outbox row it came from (at most one event per row); ``None`` for a replay.
    source_outbox_id: int | None = None
    #: The event this one replays, and the endpoint the replay covers (``None``: every one).
    replay_of: int | None = None
    replay_scope: int | None = None
    #: When the replay's deliveries were made; ``None`` on a clone: an interrupted replay.
    replay_completed_at: datetime | None = None
    #: The producer's ordering key (a replay's clone keeps its source's); ``None``: none.
    ordering_key: str | None = None


@attrs.define
class _Secret:
    id: int
    endpoint_id: int
    #: Its repr never shows the key.
    secret: StoredKey
    created_at: datetime
    expires_at: datetime | None = None


class MemoryEndpointOps:
    """Endpoints, secrets, health and the report (a base of ``MemoryWebhookRepository``)."""

    outbox_store: MemoryStore
    delivery_store: MemoryStore
    email_store: MemoryStore | None
    #: What a 410 disable enqueues for the endpoint's owner (``None``: nothing).
    gone_notice: Notice | None
    _clock: Clock
    _endpoints: dict[int, Endpoint]
    _secrets: dict[int, list[_Secret]]
    _events: dict[int, WebhookEvent]
    #: delivery row id -> (event id, endpoint id): PostgreSQL's two columns of the delivery.
    _refs: dict[int, tuple[int, int]]
    _next: dict[str, int]

    # --- one step, as one transaction ------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self, doing: str, *extra: MemoryStore | None) -> Iterator[datetime]:
        """Every store of the operation available (else ``StoreUnavailable``, nothing touched),
        then their locks, each once, in one order for every operation; yields the step's now."""
        stores = {
            id(s): s for s in (self.outbox_store, self.delivery_store, *extra) if s is not None
        }
        for store in stores.values():
            store._check_available(doing)  # noqa: SLF001 - the store's own package
        with contextlib.ExitStack() as held:
            for key in sorted(stores):
                held.enter_context(stores[key]._lock)  # noqa: SLF001
            yield self._clock.now()

    def _new_id(self, kind: str) -> int:
        self._next[kind] = self._next.get(kind, 0) + 1
        return self._next[kind]

    def _endpoint(self, endpoint_id: int) -> Endpoint:
        endpoint = self._endpoints.get(endpoint_id)
        if endpoint is None:
            raise refused_no_endpoint(endpoint_id)
        return endpoint

    def _delivery_rows(self) -> list[tuple[Row, int | None]]:
        """The deliveries lane's rows in id order, each with its endpoint (``None``: a row the
        repository did not write)."""
        rows = self.delivery_store._rows  # noqa: SLF001 - the store's own package
        return [
            (rows[i], self._refs[i][1] if i in self._refs else None)
            for i in sorted(rows)
            if rows[i].lane == DELIVERY_LANE
        ]

    def _gone(self, delivery_id: int, reason: str | None) -> None:
        """A 410 mark applied (under the deliveries store's lock): disable its endpoint and, when
        this disabled it, enqueue its owner's notice (``gone_notice``) in the same step."""
        ref = self._refs.get(delivery_id)
        if ref is not None and self._endpoints[ref[1]].enabled:
            endpoint = self._disable(
                ref[1], reason or "HTTP 410 Gone", at=self._clock.now(), notice=self.gone_notice
            )
            _log.warning("webhook endpoint %s disabled: %s", endpoint.id, endpoint.disabled_reason)

    def _notice_message(self, endpoint: Endpoint, notice: Notice | None) -> NewMessage | None:
        """The owner's notice of ``endpoint``'s disable, checked before anything is written."""
        message = owner_message(endpoint, notice)
        if message is not None:
            payload_json(message.payload)  # refused now, before anything is written
            if self.email_store is None:
                raise ConfigurationError(
                    "a disabled endpoint's owner has a notice to enqueue, but the webhook"
                    " repository was given no e-mail store (MemoryWebhookRepository(email_store=...))"
                )
        return message

    def _disable(
        self, endpoint_id: int, reason: str, *, at: datetime, notice: Notice | None = None
    ) -> Endpoint:
        """Disable an enabled endpoint and enqueue ``notice``'s message for its owner, or neither
        (a notice that raises writes nothing); a disabled one keeps its first reason and time."""
        endpoint = self._endpoints[endpoint_id]
        if not endpoint.enabled:
            return endpoint
        endpoint = attrs.evolve(
            endpoint, enabled=False, disabled_reason=reason, disabled_at=at,
            updated_at=self._clock.now(),
        )  # fmt: skip
        message = self._notice_message(endpoint, notice)
        self._endpoints[endpoint_id] = endpoint
        if message is not None and self.email_store is not None:
            self.email_store.enqueue(message)
        return endpoint

    # --- endpoints and secrets -------------------------------------------------------------------

    async def add_endpoint(  # noqa: PLR0913 - keyword-only settings of one endpoint
        self,
        url: str,
        event_types: tuple[str, ...] | list[str],
        *,
        tenant: str,
        owner_email: str | None = None,
        secret: str,
        max_per_second: int | None = None,
        description: str | None = None,
    ) -> Endpoint:
        """Register an endpoint of ``tenant`` (it receives that tenant's events only) with its
        first signing secret (the caller's): ``whsec_...`` signs ``v1``, ``whsk_...`` ``v1a``
        (Ed25519); ``max_per_second``: its rate cap (ADR 0018)."""
        tenant = check_tenant(tenant)
        key = parse_signing_secret(secret)
        cap = check_max_per_second(max_per_second)
        described = check_description(description)
        url = check_endpoint_url(url)
        types = check_event_types(event_types)
        owner = check_owner(owner_email)
        await asyncio.sleep(0)
        with self._locked("add_endpoint") as now:
            endpoint = Endpoint(
                id=self._new_id("endpoint"), tenant=tenant, url=url, event_types=types,
                enabled=True,
                owner_email=owner, disabled_reason=None, disabled_at=None,
                created_at=now, updated_at=now, scheme=scheme_of(key), max_per_second=cap,
                description=described,
            )  # fmt: skip
            self._endpoints[endpoint.id] = endpoint
            self._secrets[endpoint.id] = [_Secret(self._new_id("secret"), endpoint.id, key, now)]
        return endpoint

    async def list_endpoints(self, *, tenant: str | None = None) -> list[Endpoint]:
        """Every endpoint by id, or only ``tenant``'s."""
        if tenant is not None:
            check_tenant(tenant)
        await asyncio.sleep(0)
        with self._locked("list_endpoints"):
            return [
                self._endpoints[i]
                for i in sorted(self._endpoints)
                if tenant in (None, self._endpoints[i].tenant)
            ]

    async def endpoint(self, endpoint_id: int) -> Endpoint | None:
        await asyncio.sleep(0)
        with self._locked("endpoint"):
            return self._endpoints.get(endpoint_id)

    async def disable_endpoint(
        self, endpoint_id: int, reason: str, *, now: datetime | None = None
    ) -> Endpoint:
        """Disable an endpoint: no new delivery is made for it, its pending ones are not sent.
        Disabling a disabled endpoint keeps its first reason and time."""
        check_reason(reason)
        await asyncio.sleep(0)
        with self._locked("disable_endpoint"):
            self._endpoint(endpoint_id)
            return self._disable(endpoint_id, reason, at=stamp(self._clock, now))

    async def enable_endpoint(self, endpoint_id: int) -> Missed:
        """Enable an endpoint again, and say what it missed while disabled (replay those)."""
        await asyncio.sleep(0)
        with self._locked("enable_endpoint") as now:
            endpoint = self._endpoint(endpoint_id)
            since = endpoint.disabled_at
            if endpoint.enabled or since is None:
                return Missed(endpoint=endpoint, disabled_since=None, event_ids=())
            skipped = {
                self._refs[row.id][0]
                for row, to in self._delivery_rows()
                if to == endpoint_id
                and row.status is Status.SKIPPED
                and row.resolved_at is not None
                and row.resolved_at >= since
            }
            delivered = {event for event, to in self._refs.values() if to == endpoint_id}
            missed = tuple(
                event.id
                for event in sorted(self._events.values(), key=lambda e: e.id)
                if event.replay_of is None
                and event.tenant == endpoint.tenant
                and receives(endpoint.event_types, event.event_type)
                and (
                    (event.created_at >= since and event.id not in delivered) or event.id in skipped
                )
            )
            enabled = attrs.evolve(
                endpoint, enabled=True, disabled_reason=None, disabled_at=None, updated_at=now
            )
            self._endpoints[endpoint_id] = enabled
        return Missed(endpoint=enabled, disabled_since=since, event_ids=missed)

    async def rotate_secret(
        self,
        endpoint_id: int,
        *,
        new_secret: str,
        overlap: timedelta = DEFAULT_SECRET_OVERLAP,
        now: datetime | None = None,
    ) -> None:
        """Add ``new_secret`` (of the endpoint's scheme); every secret live now keeps signing
        beside it until ``overlap`` has passed, then only the new one signs."""
        check_overlap(overlap)
        key = parse_signing_secret(new_secret)
        await asyncio.sleep(0)
        with self._locked("rotate_secret") as at:
            check_rotation(endpoint_id, self._endpoint(endpoint_id).scheme, key)
            ends = stamp(self._clock, now) + overlap
            for old in self._secrets[endpoint_id]:
                if old.expires_at is None or old.expires_at > ends:
                    old.expires_at = ends
            self._secrets[endpoint_id].append(_Secret(self._new_id("secret"), endpoint_id, key, at))

    # --- endpoint health (ADR 0018) ---------------------------------------------------------------

    async def disable_unhealthy(
        self,
        *,
        window: timedelta = DEFAULT_HEALTH_WINDOW,
        notice: Callable[[Endpoint], NewMessage | None],
        now: datetime | None = None,
    ) -> list[Endpoint]:
        """Disable every endpoint failing without a success for ``window``, and enqueue the
        message ``notice(endpoint)`` returns (the owner's e-mail) on the e-mail store IN THE SAME
        STEP: disabled and told, or neither (a notice that raises, or a message the e-mail store
        would refuse, leaves everything as it was). The key ``webhook-endpoint-<id>-disabled-<time>``
        is set unless the message has one, so one disable tells once."""
        check_window(window)
        reason = health_reason(window)
        await asyncio.sleep(0)
        with self._locked("disable_unhealthy", self.email_store):
            at = stamp(self._clock, now)
            told: list[tuple[Endpoint, NewMessage | None]] = []
            for endpoint_id in self._unhealthy(at - window):
                endpoint = attrs.evolve(
                    self._endpoints[endpoint_id], enabled=False, disabled_reason=reason,
                    disabled_at=at, updated_at=self._clock.now(),
                )  # fmt: skip
                told.append((endpoint, self._notice_message(endpoint, notice)))
            for endpoint, message in told:
                self._endpoints[endpoint.id] = endpoint
                if message is not None and self.email_store is not None:
                    self.email_store.enqueue(message)
        for endpoint, _ in told:
            _log.warning("webhook endpoint %s disabled: %s", endpoint.id, endpoint.disabled_reason)
        return [endpoint for endpoint, _ in told]

    def _unhealthy(self, cutoff: datetime) -> list[int]:
        """PostgreSQL's ``UNHEALTHY_ENDPOINTS``: enabled endpoints with no success since
        ``cutoff``, whose run of failing deliveries began at or before it, failing again after."""
        rows = [(row, to) for row, to in self._delivery_rows() if to is not None]
        found = []
        for endpoint_id in sorted(self._endpoints):
            if not self._endpoints[endpoint_id].enabled:
                continue
            mine = [row for row, to in rows if to == endpoint_id]
            successes = [
                r.resolved_at
                for r in mine
                if r.status is Status.DISPATCHED and r.resolved_at is not None
            ]
            last_success = max(successes, default=None)
            failing = [r for r in mine if r.status in _FAILING and r.last_error is not None]
            streak = [
                r.created_at for r in failing if last_success is None or r.created_at > last_success
            ]
            last_failure = max((r.updated_at for r in failing), default=None)
            if (
                streak
                and min(streak) <= cutoff
                and (last_success is None or last_success <= cutoff)
                and last_failure is not None
                and last_failure > cutoff
            ):
                found.append(endpoint_id)
        return found

    # --- the operator's report ---------------------------------------------------------------------

    async def deliveries(
        self,
        *,
        status: Status | str | None = None,
        endpoint_id: int | None = None,
        limit: int = 100,
        tenant: str | None = None,
    ) -> DeliveryReport:
        """Deliveries grouped by status and error (largest group first, at most ``limit``), with
        the last status code and response snippet of each group's most recent delivery; only the
        deliveries to ``tenant``'s endpoints when given."""
        wanted = None if status is None else Status(status)
        await asyncio.sleep(0)
        with self._locked("deliveries"):
            rows = [
                (row, to)
                for row, to in self._delivery_rows()
                if wanted in (None, row.status)
                and endpoint_id in (None, to)
                and (tenant is None or (to is not None and self._endpoints[to].tenant == tenant))
            ]
        return delivery_report(rows, limit)
