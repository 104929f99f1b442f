"""The in-app feed (ADR 0022): Starlette routes a host mounts behind its own
authentication, and SSE push from an AFTER INSERT trigger through one LISTEN connection per process.

- :class:`Feed`: the ASGI app (:attr:`Feed.app`) and its lifecycle (``async with feed:``);
- :class:`Principal` and :data:`Authenticate`: what the host's authentication answers; the scope
  of every query and stream comes from it alone;
- :class:`FeedSettings`: ping interval, stream cap, page sizes, checked when built.

The SQL is in :mod:`outbox_adapters.postgres.channels.feed` (scoped queries, retention) and
:mod:`~outbox_adapters.postgres.channels.push` (the trigger and the listener). Needs the ``feed``
extra (Starlette, sse-starlette, and the ``postgres`` extra).
"""

from outbox_adapters.feed.app import Feed
from outbox_adapters.feed.principal import Authenticate, Principal
from outbox_adapters.feed.settings import FeedSettings
from outbox_adapters.feed.stream import PING, REFRESH

__all__ = ["PING", "REFRESH", "Authenticate", "Feed", "FeedSettings", "Principal"]
