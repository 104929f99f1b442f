"""What every route of the feed shares: what it needs of the feed (:class:`ServedFeed`), the
principal's scope, and the JSON error reply.

:class:`ServedFeed` is the part of :class:`~outbox_adapters.feed.app.Feed` the routes and the stream
read, so they do not import the module that builds them from it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Protocol

from starlette.requests import HTTPConnection
from starlette.responses import JSONResponse

from outbox_adapters.feed.principal import Authenticate, Principal
from outbox_adapters.feed.settings import FeedSettings
from outbox_adapters.feed.slots import StreamSlots
from outbox_adapters.postgres.channels.feed import FeedStore, Scope
from outbox_adapters.postgres.channels.push import ScopeListener

__all__ = ["ServedFeed", "error", "principal", "principal_scope"]


class ServedFeed(Protocol):
    """What the routes and the stream need of the feed they serve (:class:`~.app.Feed`)."""

    #: Ping interval, stream cap, page sizes.
    settings: FeedSettings
    #: The host's authentication: the scope of every query and stream comes from it alone.
    authenticate: Authenticate
    #: The process's one LISTEN connection, where each stream files its signal.
    listener: ScopeListener
    #: Where each stream's cap falls within its spread (a float in [0, 1)).
    jitter: Callable[[], float]
    #: Set when the feed closes: streams end, new ones are refused (503).
    closing: bool
    #: Streams open right now.
    open_streams: int
    #: The streams' slots, per principal and in all (the caps of ``settings``).
    slots: StreamSlots

    @property
    def store(self) -> FeedStore:
        """The scoped queries (raises while the feed is not started)."""
        ...


def error(status: int, message: str) -> JSONResponse:
    """``{"error": message}``: a sentence naming what is wrong."""
    return JSONResponse({"error": message}, status_code=status)


async def principal(authenticate: Authenticate, connection: HTTPConnection) -> Principal | None:
    """The principal the host authenticated; ``None`` when there is none (401).

    Only the host's answer counts: nothing of the request is read here.
    """
    answer = authenticate(connection)
    return await answer if inspect.isawaitable(answer) else answer


async def principal_scope(authenticate: Authenticate, connection: HTTPConnection) -> Scope | None:
    """The scope of the principal the host authenticated; ``None`` when there is none (401)."""
    found = await principal(authenticate, connection)
    return None if found is None else found.scope
