"""The domain-event lanes as a host describes them: the relay (:class:`RelayLane`) and the
consumer channels (:class:`EmailChannelLane`, :class:`InAppChannelLane`), each run by the one
runner over the broker the application names (ADR 0020, ADR 0021).

The broker's client library is imported when the runner connects, so an app describing these
lanes loads without the ``nats``/``kafka`` extra until one of them runs.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from datetime import timedelta
from typing import Any, Final

import attrs

from outbox_adapters.app.context import COMMON_OPTIONS, AppSettings, LaneContext, lane_name, strings
from outbox_adapters.app.lanes import EMAIL_OPTIONS, EmailLane, open_mailer
from outbox_adapters.brokers import BrokerUrl
from outbox_adapters.lanes.channel_workers import ChannelTiming, EmailChannelWorkers, inapp_consumer
from outbox_adapters.lanes.consumer import ChannelConsumer
from outbox_adapters.lanes.email_channel import (
    EMAIL_CHANNEL_GROUP,
    EMAIL_CHANNEL_LANE,
    EmailRecipes,
    check_public_url,
    platform_recipes,
)
from outbox_adapters.lanes.inapp import INAPP_CHANNEL_GROUP, InAppRecipes
from outbox_adapters.lanes.relay import RelayHandler, relay_lane
from outbox_adapters.postgres import PostgresStore
from outbox_adapters.postgres.events import RELAY_LANE, outbox_event
from outbox_adapters.runtime import LaneConfig, Worker
from outbox_core.backoff import CONSUMER_BACKOFF, Backoff
from outbox_core.brokers import StreamSpec
from outbox_core.errors import ConfigurationError, InvalidMessage
from outbox_core.event_timing import RelayTiming
from outbox_core.mail import validate_address

__all__ = [
    "DEFAULT_TOPIC",
    "EmailChannelLane",
    "InAppChannelLane",
    "RelayLane",
    "declared_streams",
    "drain_idle",
    "topic_streams",
]

#: The topic the platform's lifecycle events ride on.
DEFAULT_TOPIC: Final = "platform-events"
#: How long the broker keeps events unless the relay says otherwise (they carry personal data).
DEFAULT_MAX_AGE: Final = timedelta(days=7)
_CHANNEL_OPTIONS: Final = frozenset({"broker", "topics"})


def topic_streams(topics: Sequence[str], max_age: timedelta = DEFAULT_MAX_AGE) -> list[StreamSpec]:
    """One declared stream per topic (its JetStream name the topic upper-cased, ``.``/``-`` as
    ``_``); ConfigurationError naming a topic that is not one."""
    try:
        return [
            StreamSpec(
                name=topic.replace(".", "_").replace("-", "_").upper(),
                subjects=(topic,),
                max_age=max_age,
            )
            for topic in topics
        ]
    except (ConfigurationError, ValueError) as exc:
        raise ConfigurationError(f"topic: {exc}") from None


def declared_streams(
    app: AppSettings, topics: Sequence[str], max_age: timedelta = DEFAULT_MAX_AGE
) -> list[StreamSpec]:
    """The streams to declare for ``topics``: the app's own (``Outbox.streams``) for a topic one
    of them holds, else one of :func:`topic_streams`. Every lane of one topic declares the same."""
    chosen: list[StreamSpec] = []
    for topic in topics:
        own = next((spec for spec in app.streams if topic in spec.subjects), None)
        spec = own or topic_streams([topic], max_age)[0]
        if spec not in chosen:
            chosen.append(spec)
    return chosen


def drain_idle(broker_url: str) -> timedelta:
    """How long a draining consumer waits with nothing arriving before it stops: 1 s on NATS;
    8 s on Kafka, whose consumer group needs a few seconds to join and get its partitions."""
    return timedelta(seconds=8.0 if BrokerUrl.parse(broker_url).broker == "kafka" else 1.0)


def _needs_broker(app: AppSettings, lane: str) -> str:
    if app.broker is None:
        raise ConfigurationError(f"the lane {lane!r} needs a broker (--broker)")
    return app.broker


def _timing(timing: ChannelTiming | None, context: LaneContext) -> ChannelTiming:
    if timing is not None:
        return timing
    assert context.app.broker is not None  # noqa: S101 - check() refused an app without one
    return ChannelTiming(drain_idle=drain_idle(context.app.broker))


@attrs.frozen
class RelayLane:
    """The event relay: unpublished events to the broker, in key order, ``published_at`` only
    after the broker's acknowledgement; leader-gated. ``topics`` are declared at start with
    ``max_age`` (how long the broker keeps them) unless the app declares their streams itself;
    ``timing`` and ``backoff`` replace the relay's defaults (``None``: 500 events a batch, in
    windows of 500; retried 1 s to 30 s apart, never given up)."""

    topics: tuple[str, ...] = attrs.field(default=(DEFAULT_TOPIC,), converter=strings)
    max_age: timedelta = DEFAULT_MAX_AGE
    timing: RelayTiming | None = None
    backoff: Backoff | None = None

    @property
    def name(self) -> str:
        return RELAY_LANE

    @property
    def options(self) -> frozenset[str]:
        return COMMON_OPTIONS | _CHANNEL_OPTIONS | {"max_age_days", "leader"}

    @property
    def wakeup_lane(self) -> str:
        return RELAY_LANE

    def config(self, app: AppSettings) -> LaneConfig:
        stated: dict[str, Any] = {"poll_interval": app.poll_interval}
        if self.timing is not None:
            stated["timing"] = self.timing
        if self.backoff is not None:
            stated["backoff"] = self.backoff
        try:
            return relay_lane(**stated)
        except ConfigurationError as exc:
            raise ConfigurationError(f"relay: {exc}") from None

    def check(self, app: AppSettings) -> None:
        _needs_broker(app, self.name)
        self.streams(app)
        self.config(app)

    def pool_size(self) -> int:
        return 4  # the claim, the leader lease, a window's grouped mark, one spare

    def streams(self, app: AppSettings) -> Sequence[StreamSpec]:
        return declared_streams(app, self.topics, self.max_age)

    def describe(self, app: AppSettings) -> list[str]:
        where = (app.broker or "").rsplit("@", maxsplit=1)[-1]
        return [
            f"relay timing: {self.config(app).timing.describe()}",
            f"relay: {', '.join(self.topics)} to {where}",
        ]

    @contextlib.asynccontextmanager
    async def workers(self, context: LaneContext) -> AsyncIterator[Worker]:
        assert context.broker is not None  # noqa: S101 - the runner connects what streams() names
        store = PostgresStore(context.pool, table=outbox_event)
        try:
            yield Worker(
                store,
                RelayHandler(context.broker.publisher()),
                self.config(context.app),
                clock=context.clock,
                leader=context.leader,
                holder=context.holder,
                wakeup=context.wakeup,
                heartbeat=context.heartbeat,
            )
        finally:
            await store.close()


def _default_mail() -> EmailLane:
    return EmailLane(EMAIL_CHANNEL_LANE, backoff=CONSUMER_BACKOFF)


@attrs.frozen
class EmailChannelLane:
    """The e-mail channel: consumer group ``group`` on ``topic``, one e-mail row per recipient
    kind of ``recipes`` (default: the platform's welcome and owner notice, which need
    ``public_url`` and, for the owner's copy, ``platform_owner``), sent by the e-mail lane
    ``mail`` (its hooks, mailer and timing apply) in the same process. An event is acknowledged
    once each of its rows is terminal; what cannot be delivered is parked on ``<topic>.dlq``."""

    recipes: EmailRecipes | None = None
    public_url: str | None = None
    platform_owner: str | None = None
    topic: str = DEFAULT_TOPIC
    group: str = EMAIL_CHANNEL_GROUP
    mail: EmailLane = attrs.field(factory=_default_mail)
    timing: ChannelTiming | None = None

    @property
    def name(self) -> str:
        return self.mail.name

    @property
    def options(self) -> frozenset[str]:
        # The e-mail lane's timing flags are its own; the channel takes SMTP and its recipes'.
        smtp = EMAIL_OPTIONS - {
            "batch_size",
            "batch_timeout",
            "rows_in_flight",
            "group_marks",
            "budgets",
        }
        return COMMON_OPTIONS | _CHANNEL_OPTIONS | smtp | {"public_url", "platform_owner"}

    @property
    def wakeup_lane(self) -> str:
        # The channel's rows are written by this very process: the wake-up sends them at once.
        return self.mail.name

    def chosen_recipes(self) -> EmailRecipes:
        """The recipes the channel sends (ConfigurationError naming the setting that is wrong)."""
        if self.recipes is not None:
            return self.recipes
        if self.public_url is None:
            raise ConfigurationError(
                f"the e-mail channel {self.name!r} needs recipes or a public URL (--public-url)"
            )
        try:
            owner = validate_address(self.platform_owner) if self.platform_owner else None
            return platform_recipes(check_public_url(self.public_url), owner)
        except (ConfigurationError, InvalidMessage) as exc:
            raise ConfigurationError(f"--public-url / --platform-owner: {exc}") from None

    def check(self, app: AppSettings) -> None:
        _needs_broker(app, self.name)
        self.chosen_recipes()
        self.mail.check(app)
        self.streams(app)

    def pool_size(self) -> int:
        return 5

    def streams(self, app: AppSettings) -> Sequence[StreamSpec]:
        return declared_streams(app, [self.topic])

    def describe(self, app: AppSettings) -> list[str]:
        lines = [*self.mail.describe(app)[2:], f"channel email: {self.topic}"]
        if self.recipes is None and self.platform_owner is None:
            lines.append("no --platform-owner: owner_notify e-mails are left out")
        return lines

    @contextlib.asynccontextmanager
    async def workers(self, context: LaneContext) -> AsyncIterator[EmailChannelWorkers]:
        assert context.broker is not None  # noqa: S101 - the runner connects what streams() names
        mail = self.mail
        async with open_mailer(context.app, mail.name, mail.mailer, mail.timing.budgets) as opened:
            mailer = mail.capped(opened, context)
            yield EmailChannelWorkers(
                context.pool,
                context.broker.consumer(self.group, [self.topic]),
                context.broker.publisher(),
                mailer,
                sender=context.app.sender_address() or "",
                recipes=self.chosen_recipes(),
                lane_config=mail.config(context.app),
                timing=_timing(self.timing, context),
                clock=context.clock,
                wakeup=context.wakeup,
                handler=mail.handler(context, mailer),
                heartbeat=context.heartbeat,
                group=self.group,
                encryptor=context.app.encryptor,
                sealing=mail.sealing(),
            )


@attrs.frozen
class InAppChannelLane:
    """The in-app channel: consumer group ``group`` on ``topic``, one feed row per audience of
    ``recipes`` (default: the platform's notifications); it needs no SMTP."""

    name: str = attrs.field(default=INAPP_CHANNEL_GROUP, validator=lane_name("InAppChannelLane"))
    recipes: InAppRecipes | None = None
    topic: str = DEFAULT_TOPIC
    group: str = INAPP_CHANNEL_GROUP
    timing: ChannelTiming | None = None

    @property
    def options(self) -> frozenset[str]:
        return COMMON_OPTIONS | _CHANNEL_OPTIONS

    @property
    def wakeup_lane(self) -> None:
        return None  # its rows are the feed itself: nothing of this process waits for them

    def check(self, app: AppSettings) -> None:
        _needs_broker(app, self.name)
        self.streams(app)

    def pool_size(self) -> int:
        return 3

    def streams(self, app: AppSettings) -> Sequence[StreamSpec]:
        return declared_streams(app, [self.topic])

    def describe(self, app: AppSettings) -> list[str]:
        del app
        return [f"channel inapp: {self.topic}"]

    @contextlib.asynccontextmanager
    async def workers(self, context: LaneContext) -> AsyncIterator[ChannelConsumer]:
        assert context.broker is not None  # noqa: S101 - the runner connects what streams() names
        yield inapp_consumer(
            context.pool,
            context.broker.consumer(self.group, [self.topic]),
            context.broker.publisher(),
            recipes=self.recipes,
            timing=_timing(self.timing, context),
            group=self.group,
        )
