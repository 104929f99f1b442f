"""One process's webhook workers: the drainer, the deliveries' first attempts and the retry
worker, on one connection pool, plus the endpoint-health sweep (what ``outbox worker --lane
webhooks`` runs; a host can run it in-process the same way).

Every piece is the one runtime: two :class:`~outbox_adapters.runtime.Worker` s over
:class:`~outbox_adapters.postgres.PostgresStore` s of the webhook tables, and
:class:`~outbox_adapters.runtime.born.BornRows` for the first attempts, with the handlers of
:mod:`outbox_adapters.lanes.webhooks`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Final

import attrs
from psycopg_pool import AsyncConnectionPool

from outbox_adapters.clock import SystemClock
from outbox_adapters.lanes.email import email_message
from outbox_adapters.lanes.endpoint_pacing import EndpointPacers
from outbox_adapters.lanes.fresh_targets import FreshTargets
from outbox_adapters.lanes.webhooks import (
    DeliveryHandler,
    FanOutHandler,
    delivery_lane,
    drain_lane,
)
from outbox_adapters.postgres import PostgresStore
from outbox_adapters.postgres.webhooks import (
    Endpoint,
    SecretCensus,
    WebhookRepository,
    outbox_webhook,
    outbox_webhook_delivery,
    secret_census,
)
from outbox_adapters.runtime import LaneConfig, Worker, WorkerStats
from outbox_adapters.runtime.born import DEFAULT_FIRST_ATTEMPTS, BornRows
from outbox_adapters.wakeup import Wakeup
from outbox_core.errors import ConfigurationError, StoreUnavailable
from outbox_core.messages import NewMessage
from outbox_core.ports import Clock, Encryptor, Heartbeat, LeaderLease, WebhookSender
from outbox_core.webhook_timing import WebhookTiming

__all__ = ["HEALTH_WINDOW", "WebhookStats", "WebhookWorkers", "owner_notice"]

_log = logging.getLogger("outbox_adapters.lanes.webhooks")

#: An endpoint failing with no success for this long is disabled and its owner told (ADR 0018).
HEALTH_WINDOW: Final = timedelta(days=5)
#: How often the sweep looks for such endpoints.
HEALTH_INTERVAL: Final = timedelta(minutes=10)


def owner_notice(endpoint: Endpoint) -> NewMessage | None:
    """The e-mail telling an endpoint's owner it was disabled (``None`` when it has no owner)."""
    if not endpoint.owner_email:
        return None
    return email_message(
        to=endpoint.owner_email,
        subject="Webhook endpoint $endpoint_id disabled",
        text=(
            "Your webhook endpoint $endpoint_id ($endpoint_url) was disabled: $reason\n\n"
            "Deliveries to it have stopped. Once the receiver works again, re-enable it with\n"
            "`outbox endpoints enable $endpoint_id`; the command lists what it missed and how to\n"
            "replay it.\n"
        ),
        fields={
            "endpoint_id": str(endpoint.id),
            "endpoint_url": endpoint.url,
            "reason": endpoint.disabled_reason or "it kept failing",
        },
    )


@attrs.define
class WebhookStats:
    """What the three parts did."""

    drainer: WorkerStats
    first_attempts: WorkerStats
    retries: WorkerStats
    endpoints_disabled: int = 0


class WebhookWorkers:
    """The webhook pipeline of one process. ``run()`` until :meth:`request_stop` (or drained).

    :class:`~outbox_adapters.app.WebhookLane` builds it over what the lane runner made (the pool,
    the leader lease, the heartbeat, the wake-up); ``leader`` ``None`` runs both lanes
    ungated."""

    def __init__(  # noqa: PLR0913 - keyword-only knobs, each with a default
        self,
        pool: AsyncConnectionPool[Any],
        sender: WebhookSender,
        *,
        drain_config: LaneConfig | None = None,
        delivery_config: LaneConfig | None = None,
        clock: Clock | None = None,
        leader: LeaderLease | None = None,
        holder: str | None = None,
        first_attempts: int = DEFAULT_FIRST_ATTEMPTS,
        health_window: timedelta = HEALTH_WINDOW,
        health_interval: timedelta = HEALTH_INTERVAL,
        notice: Callable[[Endpoint], NewMessage | None] = owner_notice,
        wakeup: Wakeup | None = None,
        heartbeat: Heartbeat | None = None,
        encryptor: Encryptor | None = None,
    ) -> None:
        drain_config = drain_config or drain_lane()
        delivery_config = delivery_config or delivery_lane()
        timing = delivery_config.timing
        if not isinstance(timing, WebhookTiming):
            raise ConfigurationError(
                f"the deliveries' lane needs a WebhookTiming (it has the birth lease), got {timing!r}"
            )
        self.clock: Clock = clock or SystemClock()
        self.repository = WebhookRepository(pool, encryptor=encryptor)
        self._pool = pool
        self._encryptor = encryptor
        self.health_window = health_window
        self.health_interval = health_interval
        self._notice = notice
        self._stopping = asyncio.Event()
        self._disabled = 0
        deliveries = PostgresStore(pool, table=outbox_webhook_delivery, endpoint_notice=notice)
        outbox = PostgresStore(pool, table=outbox_webhook)
        self._stores = (outbox, deliveries)
        #: The endpoints' rate caps (ADR 0018): one registry for first attempts and retries.
        self.pacers = EndpointPacers(self.clock)
        attempt = DeliveryHandler(self.repository, sender, clock=self.clock, pacers=self.pacers)
        #: The targets each fan-out round reads for its first attempts, in one query.
        self.targets = FreshTargets(self.repository, clock=self.clock)
        self.first_attempts = BornRows(
            deliveries,
            DeliveryHandler(
                self.targets,
                sender,
                clock=self.clock,
                on_gone=self.targets.endpoint_gone,
                pacers=self.pacers,
            ),
            delivery_config,
            lease=timing.birth_lease,
            clock=self.clock,
            in_flight=first_attempts,
        )
        #: The drainer's handler: a claimed batch's fan-outs in one transaction.
        self.fan_out = FanOutHandler(
            self.repository, self.first_attempts, clock=self.clock, targets=self.targets
        )
        self.drainer = Worker(
            outbox,
            self.fan_out,
            drain_config,
            clock=self.clock,
            leader=leader,
            holder=holder,
            wakeup=wakeup,
            heartbeat=heartbeat,
        )
        self.retries = Worker(
            deliveries,
            attempt,
            delivery_config,
            clock=self.clock,
            leader=leader,
            holder=holder,
            heartbeat=heartbeat,
        )

    def request_stop(self) -> None:
        """Stop claiming on both lanes; first attempts already running finish and are recorded."""
        self._stopping.set()
        self.drainer.request_stop()
        self.retries.request_stop()
        self.first_attempts.request_stop()

    async def run(self, *, drain: bool = False) -> WebhookStats:
        """Run the drainer, the retry worker and the health sweep until stopped; with ``drain``,
        until nothing is due: the outbox drained, every first attempt recorded, no delivery due.

        Raises :class:`ConfigurationError` before claiming anything when a live signing secret is
        sealed under a key id the encryptor lacks (:meth:`check_secrets`)."""
        try:
            await self.check_secrets()
            if drain:
                await self.drainer.run(drain=True)
                await self._first_attempts_recorded()
                await self.retries.run(drain=True)
            else:
                try:
                    async with asyncio.TaskGroup() as group:
                        group.create_task(self.drainer.run())
                        group.create_task(self.retries.run())
                        group.create_task(self._health_sweeps())
                finally:
                    await self._first_attempts_recorded()
        finally:
            # The stores keep a pooled connection between statements: give them back (the pool
            # is the caller's).
            for store in self._stores:
                await store.close()
        return WebhookStats(
            drainer=self.drainer.stats,
            first_attempts=self.first_attempts.stats,
            retries=self.retries.stats,
            endpoints_disabled=self._disabled,
        )

    async def _first_attempts_recorded(self) -> None:
        """Wait for a fan-out still committing (its first attempts start when it does), then for
        every first attempt to be recorded."""
        await self.fan_out.wait()
        await self.first_attempts.wait()

    async def check_secrets(self, *, refuse: bool = True) -> SecretCensus:
        """Refuse to start without a key the live signing secrets need (a
        :class:`ConfigurationError` naming the key id), and warn, loudly, about secrets still
        stored in plaintext although keys are configured: they keep signing (no outage), and the
        warning names the command that seals them (ADR 0030). Run at start and, with
        ``refuse=False`` (a running worker logs the missing key instead: its deliveries to those
        endpoints wait and retry), at every endpoint-health sweep."""
        census = await secret_census(self._pool)
        try:
            census.check(self._encryptor)
        except ConfigurationError as exc:
            if refuse:
                raise
            _log.error("%s; deliveries to those endpoints are retried, none is sent", exc)
        warning = census.warning(self._encryptor)
        if warning is not None:
            _log.warning("%s", warning)
        return census

    async def sweep_health(self) -> list[Endpoint]:
        """Disable the endpoints failing with no success for the health window (ADR 0018), each with
        its owner's notice enqueued in the same transaction; returns them."""
        disabled = await self.repository.disable_unhealthy(
            window=self.health_window, notice=self._notice
        )
        for endpoint in disabled:
            self._disabled += 1
            _log.warning(
                "endpoint %s disabled: %s", endpoint.id, endpoint.disabled_reason or "failing"
            )
        return disabled

    async def _health_sweeps(self) -> None:
        while not self._stopping.is_set():
            try:
                await self.sweep_health()
                await self.check_secrets(refuse=False)
            except StoreUnavailable as exc:
                _log.warning(
                    "endpoint health sweep failed (%s); next one in the next interval", exc
                )
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.health_interval.total_seconds()):
                    await self._stopping.wait()
