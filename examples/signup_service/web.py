"""The service as one ASGI app: its pages and API, the library's feed, and the workers beside them.

Authentication is the host's job, and here it is a signed session cookie (Starlette's
``SessionMiddleware``): a signup signs its browser in as that tenant's admin, and the platform
dashboard asks for the operator password. The feed gets the principal from that session and
from nothing else (:meth:`Service.authenticate`): the audience of every query and stream is the
session's, never a query parameter's.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any, Final

from psycopg_pool import AsyncConnectionPool
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import HTTPConnection
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from examples.signup_service import accounts
from examples.signup_service.handlers import Handlers
from examples.signup_service.pages import STATIC
from examples.signup_service.ratelimit import limiter_for
from examples.signup_service.recipes import ConfirmLinks
from examples.signup_service.settings import ServiceSettings
from examples.signup_service.workers import ServiceWorkers
from outbox_adapters.feed import Feed, Principal

__all__ = ["Service"]

#: Pages load only their own script and style; no frames; forms post only here. Referrer-Policy:
#: the confirmation page's URL holds the token.
_HEADERS: Final = [
    (
        b"content-security-policy",
        (
            b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
            b" object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"
        ),
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
]


class SecurityHeaders:
    """Adds :data:`_HEADERS` to every response (plain ASGI: a stream passes through unbuffered)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *_HEADERS]}
            await send(message)

        await self.app(scope, receive, with_headers)


class Service:
    """The running service: pool, feed, workers, limiter; :attr:`app` is its ASGI app."""

    def __init__(self, settings: ServiceSettings, *, run_workers: bool = True) -> None:
        self.settings = settings
        self.links = ConfirmLinks(
            settings.secret_key, settings.public_url, max_age=settings.confirm_max_age
        )
        self.limiter = limiter_for(settings.redis_url, settings.rate_limit, settings.rate_window)
        self.run_workers = run_workers
        self._pool: AsyncConnectionPool[Any] | None = None
        self._feed: Feed | None = None
        self.workers: ServiceWorkers | None = None
        handlers = Handlers(self)
        self.app = Starlette(
            routes=[
                Route("/", handlers.home),
                Route("/healthz", handlers.health),
                Route("/v1/signup", handlers.signup, methods=["POST"]),
                Route("/confirm", handlers.confirm_form, methods=["GET"]),
                Route("/confirm", handlers.confirm, methods=["POST"]),
                Route("/tenant", handlers.tenant_dashboard),
                Route("/platform", handlers.platform_dashboard),
                Route("/platform/login", handlers.platform_login, methods=["POST"]),
                Route("/logout", handlers.logout, methods=["POST"]),
                Mount("/static", StaticFiles(directory=STATIC)),
                Mount("/feed", app=self._feed_app),
            ],
            middleware=[
                Middleware(SecurityHeaders),
                Middleware(
                    SessionMiddleware,
                    secret_key=settings.secret_key,
                    session_cookie="signup_session",
                    max_age=14 * 24 * 3600,
                    same_site="lax",
                    https_only=settings.secure_cookies,
                ),
            ],
            lifespan=self._lifespan,
        )

    @property
    def pool(self) -> AsyncConnectionPool[Any]:
        if self._pool is None:
            raise RuntimeError("the service is not started")
        return self._pool

    @property
    def feed(self) -> Feed:
        if self._feed is None:
            raise RuntimeError("the service is not started")
        return self._feed

    async def _feed_app(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.feed.app(scope, receive, send)

    @staticmethod
    def authenticate(connection: HTTPConnection) -> Principal | None:
        """The feed's principal: from the session cookie, and from nothing else."""
        session = connection.session
        if session.get("operator") is True:
            return Principal.platform_operator()
        tenant = session.get("tenant_id")
        return Principal.tenant_user(tenant) if isinstance(tenant, str) and tenant else None

    @contextlib.asynccontextmanager
    async def _lifespan(self, _app: Starlette) -> AsyncIterator[None]:
        async with AsyncConnectionPool(
            self.settings.dsn,
            min_size=2,
            max_size=20,
            kwargs={"autocommit": True},
            open=False,
            name="signup-service",
        ) as pool:
            self._pool = pool
            await accounts.create_tables(pool)
            feed = Feed(
                self.settings.dsn, self.authenticate, settings=self.settings.feed, pool=pool
            )
            async with contextlib.AsyncExitStack() as stack:
                stack.push_async_callback(self.limiter.aclose)
                await stack.enter_async_context(feed)
                self._feed = feed
                if self.run_workers:
                    self.workers = await stack.enter_async_context(
                        ServiceWorkers(self.settings, self.links)
                    )
                yield
            self._pool = None
