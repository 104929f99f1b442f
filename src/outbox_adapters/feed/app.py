"""``Feed``: the in-app feed as an ASGI app a host mounts, and the push machinery behind it.

::

    feed = Feed(dsn, authenticate)            # authenticate(request) -> Principal | None
    app = Starlette(routes=[Mount("/feed", feed.app), ...], lifespan=...)
    # in the host's lifespan:
    async with feed:                          # the LISTEN connection (and a pool, unless given)
        yield

A mounted app's own lifespan is not run by Starlette, so the host opens and closes the feed in
its lifespan. :attr:`Feed.app` refuses cross-site POSTs and forbids framing and sniffing
(:class:`~outbox_adapters.browser.BrowserGuard`); ``FeedSettings.allowed_origins`` names other
origins to accept. Closing ends every open stream (their clients reconnect to another replica, or to
this one once it is back) and then the LISTEN connection.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any, Self

from psycopg_pool import AsyncConnectionPool
from starlette.routing import Router

from outbox_adapters.browser import BrowserGuard
from outbox_adapters.feed.principal import Authenticate
from outbox_adapters.feed.routes import STREAM, routes
from outbox_adapters.feed.settings import FeedSettings
from outbox_adapters.feed.slots import StreamSlots
from outbox_adapters.postgres.channels.feed import FeedStore
from outbox_adapters.postgres.channels.push import ScopeListener
from outbox_adapters.postgres.pools import open_pool

__all__ = ["Feed"]


class Feed:
    """The feed's routes (:attr:`app`), its store and its one LISTEN connection.

    ``pool``: the host's pool of autocommit connections for the feed's queries; without one, the
    feed opens a small pool of its own (``pool_size`` connections at most) when it starts.
    ``listener``: a :class:`ScopeListener` to use instead of a default one (its reconnect pauses
    and health checks tuned); the feed starts and closes it. Nothing is done in the constructor.
    """

    def __init__(  # noqa: PLR0913 - keyword-only, each with a default
        self,
        dsn: str,
        authenticate: Authenticate,
        *,
        settings: FeedSettings | None = None,
        pool: AsyncConnectionPool[Any] | None = None,
        pool_size: int = 4,
        listener: ScopeListener | None = None,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self.settings = settings if settings is not None else FeedSettings()
        self.authenticate = authenticate
        #: Where each stream's cap falls within its spread (a float in [0, 1)).
        self.jitter = jitter
        self.listener = listener if listener is not None else ScopeListener(dsn)
        self._dsn = dsn
        self._pool = pool
        self._own_pool: AsyncConnectionPool[Any] | None = None
        self._pool_size = pool_size
        self._store: FeedStore | None = None if pool is None else FeedStore(pool)
        #: Set by :meth:`aclose`: streams end, new ones are refused (503).
        self.closing = False
        #: Streams open right now.
        self.open_streams = 0
        #: The streams' slots: at most ``max_streams_per_principal`` each, ``max_streams`` in all.
        self.slots = StreamSlots(self.settings.max_streams_per_principal, self.settings.max_streams)
        #: The ASGI app to mount. A bare Router, not a Starlette app: the host's app already wraps
        #: every request in its error and exception middleware, and a second stack would cost each
        #: stream's every event three more wrapped sends (ADR 0022: the push latency). The guard
        #: in front passes the stream the server's own ``send``.
        self.app = BrowserGuard(
            Router(routes=routes(self)),
            allowed_origins=self.settings.allowed_origins,
            direct=(STREAM,),
        )

    @property
    def store(self) -> FeedStore:
        if self._store is None:
            raise RuntimeError("the feed is not started: `async with feed:` in the host's lifespan")
        return self._store

    async def start(self) -> None:
        """Open the pool (unless the host gave one) and the LISTEN connection."""
        if self._pool is None:
            pool = await open_pool(
                self._dsn, max_size=self._pool_size, name="outbox-feed", fail_fast=False
            )
            self._own_pool = pool
            self._store = FeedStore(pool)
        try:
            await self.listener.start()
        except BaseException:
            await self._close_pool()
            raise

    def end_streams(self) -> None:
        """End every open stream now and refuse new ones (503), the rest of the feed still
        answering. A host calls it before its server's graceful shutdown, which would otherwise
        wait for the streams (each up to its cap) to end by themselves."""
        self.closing = True
        self.listener.refresh_all()  # each stream wakes, sees `closing` and ends

    async def aclose(self) -> None:
        """End every stream, then close the LISTEN connection (and the feed's own pool)."""
        self.end_streams()
        await self.listener.aclose()
        await self._close_pool()

    async def _close_pool(self) -> None:
        pool, self._own_pool = self._own_pool, None
        if pool is not None:
            await pool.close()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.aclose()
