"""The feed's settings, checked when they are built (a bad one is a ``ConfigurationError`` naming it).

Defaults (ADR 0022): a comment ping every 25 s (under the 30-60 s idle timeouts of common proxies
and load balancers); each stream closed after about 20 minutes (``stream_cap`` less up to
``stream_cap_spread`` of it, drawn per stream so clients that connected together don't all come
back together), after which the client reconnects and is authenticated again; pages of 20, at
most 100. At most 10 open streams per principal (a user's tabs; 429 past it) and 1,000 per process
(the fan-out ADR 0022 measured within its latency goal; 503 past it). No other origin's
state-changing requests are accepted unless listed in ``allowed_origins``
(:class:`~outbox_adapters.browser.BrowserGuard`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import attrs

from outbox_adapters.browser import origin_of
from outbox_core.errors import ConfigurationError

__all__ = ["FeedSettings"]


def _positive(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigurationError(f"FeedSettings {name} must be a finite number, got {value!r}")
    if value <= 0:
        raise ConfigurationError(f"FeedSettings {name} must be positive, got {value!r}")


def _tuple(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(values)


@attrs.frozen
class FeedSettings:
    #: Seconds between comment pings on an idle stream.
    ping_interval: float = 25.0
    #: Seconds a stream stays open at the most (then it ends; the client reconnects).
    stream_cap: float = 20 * 60.0
    #: The fraction of ``stream_cap`` a stream may end early by, drawn per stream (0: exactly).
    stream_cap_spread: float = 0.1
    #: Seconds past the cap a write may still hang (a client that stopped reading) before the
    #: stream is cancelled: no stream outlives ``stream_cap + send_timeout``.
    send_timeout: float = 10.0
    #: Notifications per page when the client asks for no size.
    page_size: int = 20
    #: The largest page a client may ask for.
    max_page_size: int = 100
    #: Open streams one principal may hold (its user's tabs); past it a new one is a 429.
    max_streams_per_principal: int = 10
    #: Open streams the process serves at most; past it a new one is a 503.
    max_streams: int = 1000
    #: Other origins (``https://app.example.com``) whose POSTs are accepted: the public origin when
    #: a proxy in front changes the scheme or host the app sees. The request's own is always.
    allowed_origins: tuple[str, ...] = attrs.field(default=(), converter=_tuple)

    def __attrs_post_init__(self) -> None:
        for name in ("ping_interval", "stream_cap", "send_timeout"):
            _positive(name, getattr(self, name))
        spread = self.stream_cap_spread
        if isinstance(spread, bool) or not isinstance(spread, int | float) or not 0 <= spread < 1:
            raise ConfigurationError(
                f"FeedSettings stream_cap_spread must be a fraction in [0, 1), got {spread!r}"
            )
        for name in ("page_size", "max_page_size", "max_streams_per_principal", "max_streams"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigurationError(
                    f"FeedSettings {name} must be a whole number of at least 1, got {value!r}"
                )
        if self.page_size > self.max_page_size:
            raise ConfigurationError(
                f"FeedSettings page_size ({self.page_size}) must not exceed max_page_size"
                f" ({self.max_page_size})"
            )
        for origin in self.allowed_origins:
            if not isinstance(origin, str) or origin_of(origin) is None:
                raise ConfigurationError(
                    f"FeedSettings allowed_origins must be scheme://host[:port] origins,"
                    f" got {origin!r}"
                )
