"""The feed's SSE stream: payload-free ``refresh`` events for one scope, pings, a capped lifetime.

A stream files a :class:`StreamSignal` under its scope on the process's one
:class:`~outbox_adapters.postgres.channels.push.ScopeListener` and waits on it. When the listener
sets it (a notification of the scope was inserted, or the listener (re)connected and every stream
must assume it missed something) the stream sends ``event: refresh`` with an empty ``data`` line;
the client refetches its unread count and, if it shows the list, the first page. Signals that
arrive while that event is being written coalesce into one more refresh: a slow client is owed one
refetch, not a backlog, and the fan-out never waits for it (setting a signal is all it does).

The same signal carries the stream's own timers, so an idle stream costs no task wake-up but its
pings, and an event costs no timer at all (with a thousand streams woken by one insert, the
per-event cost is what the push latency is made of: ADR 0022, bench/feed.py):

- a ``: ping`` comment every ``ping_interval`` seconds keeps proxies from closing an idle stream;
- at its cap (about 20 minutes) the stream ends: the client's ``EventSource`` reconnects, and the
  host authenticates that new request, so a revoked session stops receiving within the cap;
- a client that disconnects ends its stream at once (one task per stream watches for it);
- a write that has not finished ``send_timeout`` seconds after the cap (a client that stopped
  reading, its socket buffer full) is cancelled: nothing outlives cap + ``send_timeout``;
- closing the feed ends every stream.

A new stream past a cap (``FeedSettings.max_streams_per_principal``: 429; ``max_streams``: 503) is
refused with a ``Retry-After`` (:mod:`.slots`). The stream is served without the
:class:`~outbox_adapters.browser.BrowserGuard`'s wrapped ``send``: it sends the security headers
itself, on its refusals too.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Final

from starlette.requests import HTTPConnection
from starlette.types import Receive, Scope, Send

from outbox_adapters.browser import SECURITY_HEADERS
from outbox_adapters.feed.replies import ServedFeed, error, principal
from outbox_adapters.feed.slots import RETRY_AFTER
from outbox_adapters.wakeup import LaneWakeup

__all__ = ["PING", "REFRESH", "StreamEndpoint", "StreamSignal"]

#: The one event a stream sends: "your feed may have changed; refetch it" (no payload).
REFRESH: Final = b"event: refresh\r\ndata:\r\n\r\n"
#: The keep-alive comment.
PING: Final = b": ping\r\n\r\n"

_HEADERS: Final = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-store"),
    # nginx and its kin buffer responses unless told not to: an event must leave at once.
    (b"x-accel-buffering", b"no"),
    *SECURITY_HEADERS,
]
#: What a refused stream is told, by the cap that refused it.
_REFUSED: Final = {
    "principal": (429, "too many open streams for this principal; close one or retry later"),
    "process": (503, "this server holds all the streams it may; retry later"),
}


class StreamSignal(LaneWakeup):
    """One stream's wake-up: the listener's refreshes, and the stream's own ping and end."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.refresh = False
        self.ping = False
        self.ended = False

    def set(self) -> None:
        """The listener's call: the scope's feed may have changed."""
        self.refresh = True
        super().set()

    def ping_due(self) -> None:
        self.ping = True
        super().set()

    def end(self) -> None:
        self.ended = True
        super().set()


class StreamEndpoint:
    """``GET /stream`` as a plain ASGI app (the response is the stream itself)."""

    def __init__(self, feed: ServedFeed) -> None:
        self._feed = feed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        feed = self._feed
        found = await principal(feed.authenticate, HTTPConnection(scope, receive))
        if found is None:
            await _refuse(401, "not authenticated", scope, receive, send)
            return
        if feed.closing:
            await _refuse(503, "the feed is closing", scope, receive, send)
            return
        if scope["method"] == "HEAD":  # headers only: a HEAD must not hold a stream open
            await send({"type": "http.response.start", "status": 200, "headers": _HEADERS})
            await send({"type": "http.response.body", "body": b""})
            return
        key = found.key
        refused = feed.slots.take(key)  # no await between the check and the taking
        if refused is not None:
            status, message = _REFUSED[refused]
            await _refuse(status, message, scope, receive, send, retry=True)
            return
        try:
            await send({"type": "http.response.start", "status": 200, "headers": _HEADERS})
            signal = StreamSignal(found.scope.key)
            feed.listener.add(signal)
            settings = feed.settings
            cap = settings.stream_cap * (1.0 - settings.stream_cap_spread * feed.jitter())
            await _stream(feed, signal, send, receive, cap)
        finally:
            feed.slots.give_back(key)


async def _refuse(  # noqa: PLR0913 - the ASGI triple and the reply
    status: int, message: str, scope: Scope, receive: Receive, send: Send, *, retry: bool = False
) -> None:
    reply = error(status, message)
    reply.raw_headers.extend(SECURITY_HEADERS)
    if retry:
        reply.headers["retry-after"] = str(RETRY_AFTER)
    await reply(scope, receive, send)


async def _stream(
    feed: ServedFeed, signal: StreamSignal, send: Send, receive: Receive, cap: float
) -> None:
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    interval = feed.settings.ping_interval
    ping = loop.call_later(interval, signal.ping_due)
    capped = loop.call_later(cap, signal.end)
    stuck = loop.call_later(cap + feed.settings.send_timeout, task.cancel) if task else None
    watcher = asyncio.ensure_future(_watch_disconnect(receive, signal))
    feed.open_streams += 1
    try:
        while True:
            await signal.wait()
            signal.clear()
            if signal.ended or feed.closing:
                break
            if signal.refresh:
                signal.refresh = False
                await send({"type": "http.response.body", "body": REFRESH, "more_body": True})
            if signal.ping:
                signal.ping = False
                ping = loop.call_later(interval, signal.ping_due)
                await send({"type": "http.response.body", "body": PING, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    except asyncio.CancelledError:
        if not signal.ended or task is None:
            raise  # not our cap: the server is stopping us
        task.uncancel()  # our own cancel of a write stuck past cap + send_timeout: the stream ends
    finally:
        feed.open_streams -= 1
        for handle in (ping, capped, stuck):
            if handle is not None:
                handle.cancel()
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher


async def _watch_disconnect(receive: Receive, signal: StreamSignal) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    signal.end()
