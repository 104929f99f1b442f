"""The webhook lane as a host describes it: :class:`WebhookLane` (drainer, first attempts, retries
and the endpoint-health sweep of :class:`~outbox_adapters.lanes.webhook_workers.WebhookWorkers`).

httpx is imported when the lane's workers are built, so an app describing a webhook lane loads
without the ``webhooks`` extra until that lane runs.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final

import attrs

from outbox_adapters.app.context import COMMON_OPTIONS, AppSettings, LaneContext, strings
from outbox_adapters.extras import missing_extra
from outbox_adapters.lanes.send_caps import PacedSender
from outbox_adapters.lanes.webhook_workers import (
    HEALTH_INTERVAL,
    HEALTH_WINDOW,
    WebhookWorkers,
    owner_notice,
)
from outbox_adapters.lanes.webhooks import WEBHOOK_LANE, delivery_lane, drain_lane
from outbox_adapters.postgres.webhooks import Endpoint
from outbox_adapters.runtime import LaneConfig
from outbox_adapters.runtime.born import DEFAULT_FIRST_ATTEMPTS
from outbox_core.backoff import Backoff
from outbox_core.errors import ConfigurationError
from outbox_core.messages import NewMessage
from outbox_core.ports import WebhookSender
from outbox_core.send_caps import check_cap
from outbox_core.webhook_timing import WebhookTiming

if TYPE_CHECKING:
    from outbox_adapters.http import DestinationGuard
    from outbox_core.brokers import StreamSpec

__all__ = ["WEBHOOK_OPTIONS", "SenderFactory", "WebhookLane"]

#: The host's own webhook sender (a recording one in its tests): called once per run.
SenderFactory = Callable[[], AbstractAsyncContextManager[WebhookSender]]

#: The ``outbox worker`` options only the webhook lane takes (where its deliveries may go).
WEBHOOK_OPTIONS: Final = frozenset(
    {"allow", "allow_http", "environment", "leader", "max_per_second"}
)


def _positive(_inst: object, attribute: attrs.Attribute[Any], value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ConfigurationError(f"WebhookLane.{attribute.name}: a positive count, got {value!r}")


def _cap(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    check_cap(f"WebhookLane.{attribute.name} (--max-per-second)", value)


@attrs.frozen
class WebhookLane:
    """The webhook pipeline: where deliveries may go (``allow``: networks allowed although
    private; ``allow_http``: plain http, refused in production), how many requests run at once
    per origin (``None``: the sender's default, 8) and in all, the first attempts in flight, the health sweep's window and the
    notice sent to a disabled endpoint's owner. ``sender``: a sender of the host's own instead of
    httpx (the destination rules are then the host's). ``timing`` and ``backoff`` replace the
    deliveries' defaults (``None``: 13 s an attempt, 8 attempts over about 27.6 hours).
    ``max_per_second``: requests started per second by the lane in this process, first attempts
    and retries together (``None``: uncapped; :mod:`outbox_core.send_caps`); waiting for a start
    spends the attempt's budget, and one that gets none before its deadline is a transient
    failure, nothing sent."""

    allow: tuple[str, ...] = attrs.field(default=(), converter=strings)
    allow_http: bool = False
    max_per_origin: int | None = attrs.field(default=None, validator=_positive)
    max_connections: int = attrs.field(default=100, validator=_positive)
    first_attempts: int = attrs.field(default=DEFAULT_FIRST_ATTEMPTS, validator=_positive)
    health_window: timedelta = HEALTH_WINDOW
    health_interval: timedelta = HEALTH_INTERVAL
    notice: Callable[[Endpoint], NewMessage | None] = owner_notice
    sender: SenderFactory | None = None
    timing: WebhookTiming | None = None
    backoff: Backoff | None = None
    max_per_second: int | None = attrs.field(default=None, validator=_cap)

    @property
    def name(self) -> str:
        return WEBHOOK_LANE

    @property
    def options(self) -> frozenset[str]:
        return COMMON_OPTIONS | WEBHOOK_OPTIONS

    @property
    def wakeup_lane(self) -> str:
        return WEBHOOK_LANE

    def configs(self, app: AppSettings) -> tuple[LaneConfig, LaneConfig]:
        """The drainer's and the deliveries' runtime configurations."""
        stated: dict[str, Any] = {"poll_interval": app.poll_interval}
        if self.timing is not None:
            stated["timing"] = self.timing
        if self.backoff is not None:
            stated["backoff"] = self.backoff
        try:
            return drain_lane(poll_interval=app.poll_interval), delivery_lane(**stated)
        except ConfigurationError as exc:
            raise ConfigurationError(f"webhook lanes: {exc}") from None

    def guard(self, app: AppSettings) -> DestinationGuard:
        """Where deliveries may go (ConfigurationError naming the setting that is wrong)."""
        if self.allow_http and app.environment.strip().casefold() == "production":
            raise ConfigurationError(
                "allow_http (--allow-http): webhooks go to https:// URLs only in production"
            )
        try:
            from outbox_adapters.http import DestinationGuard  # noqa: PLC0415 - webhooks extra
        except ImportError as exc:
            raise missing_extra(exc, f"the {WEBHOOK_LANE!r} lane") from exc
        try:
            return DestinationGuard(allow=self.allow, require_https=not self.allow_http)
        except ConfigurationError as exc:
            raise ConfigurationError(f"allow (--allow-destination): {exc}") from None

    def check(self, app: AppSettings) -> None:
        self.configs(app)
        if self.sender is None:
            self.guard(app)

    def pool_size(self) -> int:
        # Claims and marks of two lanes, the leader lease, and the first attempts' marks.
        return 12

    def streams(self, app: AppSettings) -> Sequence[StreamSpec] | None:
        del app
        return None

    def describe(self, app: AppSettings) -> list[str]:
        drain, deliveries = self.configs(app)
        lines = [
            f"drainer timing: {drain.timing.describe()}",
            f"deliveries timing: {deliveries.timing.describe()}",
        ]
        if self.sender is None:
            lines.append(self.guard(app).describe())
        else:
            lines.append("webhook sender: the application's own")
        if self.max_per_second is not None:
            lines.append(f"send caps: {self.max_per_second} requests a second")
        return lines

    def _sender(self, app: AppSettings) -> AbstractAsyncContextManager[WebhookSender]:
        if self.sender is not None:
            return self.sender()
        from outbox_adapters.http.sender import (  # noqa: PLC0415 - the webhooks extra
            DEFAULT_MAX_PER_ORIGIN,
            HttpxWebhookSender,
        )

        return HttpxWebhookSender(
            self.guard(app),
            max_connections=self.max_connections,
            max_per_origin=self.max_per_origin or DEFAULT_MAX_PER_ORIGIN,
        )

    @contextlib.asynccontextmanager
    async def workers(self, context: LaneContext) -> AsyncIterator[WebhookWorkers]:
        drain, deliveries = self.configs(context.app)
        async with self._sender(context.app) as opened:
            sender: WebhookSender = opened
            if self.max_per_second is not None:
                # One per lane run: first attempts and retries share the rate.
                sender = PacedSender(
                    opened, clock=context.clock, max_per_second=self.max_per_second
                )
            yield WebhookWorkers(
                context.pool,
                sender,
                drain_config=drain,
                delivery_config=deliveries,
                clock=context.clock,
                leader=context.leader,
                holder=context.holder,
                first_attempts=self.first_attempts,
                health_window=self.health_window,
                health_interval=self.health_interval,
                notice=self.notice,
                wakeup=context.wakeup,
                heartbeat=context.heartbeat,
                encryptor=context.app.encryptor,
            )
