"""The service's settings: where its parts are, and the few figures a test shrinks."""

from __future__ import annotations

from datetime import timedelta

import attrs

from outbox_adapters.feed import FeedSettings
from outbox_adapters.lanes.channel_workers import ChannelTiming
from outbox_adapters.smtp import SmtpSettings
from outbox_core.backoff import CONSUMER_BACKOFF, ExponentialBackoff
from outbox_core.errors import ConfigurationError
from outbox_core.event_timing import RelayTiming

__all__ = ["RELAY_BACKOFF", "ServiceSettings"]

#: The relay's pause between failed publishes: 1 s doubling to 10 s, never given up (an event waits
#: for its broker as long as it takes).
RELAY_BACKOFF = ExponentialBackoff(
    max_attempts=2**31 - 1,
    base=timedelta(seconds=1),
    factor=2.0,
    cap=timedelta(seconds=10),
)


def _positive(_inst: object, attribute: attrs.Attribute[float], value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigurationError(
            f"ServiceSettings {attribute.name} must be positive, got {value!r}"
        )


@attrs.frozen(kw_only=True)
class ServiceSettings:
    """Everything the service needs. ``secret_key`` signs the session cookie and the confirmation
    links; ``operator_password`` lets a platform operator into the platform dashboard."""

    dsn: str
    #: The broker (``nats://``, ``tls://``, ``kafka://``, ``kafkas://``: outbox_adapters.brokers).
    broker_url: str
    smtp: SmtpSettings
    public_url: str
    platform_owner: str
    secret_key: str = attrs.field(repr=False)
    operator_password: str = attrs.field(repr=False)
    redis_url: str | None = None
    #: Signups one client may make per ``rate_window`` seconds.
    rate_limit: int = 5
    rate_window: float = attrs.field(default=60.0, validator=_positive)
    #: How often a dashboard polls while its stream is down.
    poll_seconds: float = attrs.field(default=30.0, validator=_positive)
    #: How long a confirmation link stays valid.
    confirm_max_age: float = attrs.field(default=7 * 24 * 3600.0, validator=_positive)
    #: The broker subject the events go to, and the JetStream stream holding it. Signup events
    #: carry personal data (the admin's address): the stream keeps them ``stream_max_age``.
    topic: str = "signup.events"
    stream: str = "SIGNUP_EVENTS"
    stream_max_age: timedelta = timedelta(days=7)
    feed: FeedSettings = attrs.field(factory=FeedSettings)
    relay_timing: RelayTiming = attrs.field(factory=RelayTiming)
    relay_backoff: ExponentialBackoff = RELAY_BACKOFF
    channel_timing: ChannelTiming = attrs.field(factory=ChannelTiming)
    email_backoff: ExponentialBackoff = CONSUMER_BACKOFF
    #: The workers' idle poll (they are woken by LISTEN/NOTIFY before that).
    poll_interval: float = attrs.field(default=1.0, validator=_positive)
    #: Secure cookies (HTTPS only): on unless the public URL is plain http (the local run).
    secure_cookies: bool = attrs.field()

    @secure_cookies.default
    def _https(self) -> bool:
        return self.public_url.startswith("https://")

    def __attrs_post_init__(self) -> None:
        if len(self.secret_key) < 32:
            raise ConfigurationError("ServiceSettings secret_key must be at least 32 characters")
        if not self.operator_password:
            raise ConfigurationError("ServiceSettings operator_password must not be empty")
        if isinstance(self.rate_limit, bool) or not isinstance(self.rate_limit, int):
            raise ConfigurationError("ServiceSettings rate_limit must be a whole number")
        if self.rate_limit < 1:
            raise ConfigurationError(
                f"ServiceSettings rate_limit must be at least 1, got {self.rate_limit}"
            )
