"""The feed's SSE stream: payload-free ``refresh`` events for one scope, pings, a capped lifetime.

A stream subscribes to its scope on the process's one :class:`~outbox_adapters.postgres.channels.
push.ScopeListener` and waits. When the signal fires (a notification of the scope was inserted, or
the listener (re)connected and every stream must assume it missed something) it clears the signal
and sends ``event: refresh`` with an empty ``data`` line; the client refetches its unread count
and, if it shows the list, the first page. Signals that fire while that event is being written
coalesce into one more refresh: a slow client is owed one refetch, not a backlog, and the fan-out
never waits for it (setting a signal is all it does). A client whose writes stall past
``send_timeout`` is dropped by sse-starlette; so is one that disconnects.

The stream ends by itself after its cap (about 20 minutes): the client's ``EventSource``
reconnects, and the host authenticates that new request, so a revoked session stops receiving
within the cap. It also ends when the feed closes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Final

from sse_starlette import EventSourceResponse, ServerSentEvent

from outbox_adapters.postgres.channels.feed import Scope
from outbox_adapters.wakeup import LaneWakeup

if TYPE_CHECKING:
    from outbox_adapters.feed.app import Feed

__all__ = ["REFRESH", "stream_response"]

#: The one event a stream sends: "your feed may have changed; refetch it".
REFRESH: Final = "refresh"


#: The event as it goes on the wire, encoded once (every stream sends the same bytes).
_REFRESH_BYTES: Final = ServerSentEvent(data="", event=REFRESH).encode()


def _ping() -> ServerSentEvent:
    return ServerSentEvent(comment="ping")


def stream_response(feed: Feed, scope: Scope, jitter: Callable[[], float]) -> EventSourceResponse:
    """The SSE response for one client of ``scope``, subscribed before the response starts."""
    settings = feed.settings
    signal = feed.listener.subscribe(scope)
    cap = settings.stream_cap * (1.0 - settings.stream_cap_spread * jitter())
    return EventSourceResponse(
        _events(feed, signal, cap),
        ping=settings.ping_interval,
        ping_message_factory=_ping,
        send_timeout=settings.send_timeout,
        headers={"Cache-Control": "no-store"},
    )


async def _events(feed: Feed, signal: LaneWakeup, cap: float) -> AsyncIterator[bytes]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + cap
    # The cap fires the stream's own signal once, rather than a timeout armed around every wait:
    # with a thousand streams woken by one insert, the per-event cost is what the latency is made of.
    capped = loop.call_at(deadline, signal.set)
    feed.open_streams += 1
    try:
        while True:
            await signal.wait()
            signal.clear()
            if feed.closing or loop.time() >= deadline:
                return  # the cap: the client reconnects and is authenticated afresh
            yield _REFRESH_BYTES
    finally:
        capped.cancel()
        feed.open_streams -= 1
