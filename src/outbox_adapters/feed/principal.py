"""Who is asking: the principal the host's authentication hands the feed, and the scope it sees.

The feed never authenticates anyone itself. The host passes an :data:`Authenticate` callable that
reads ITS session, token or header and answers a :class:`Principal` (or ``None``: 401). The scope of
every query and every stream comes from that principal and from nothing else: no query parameter,
path segment or header is ever consulted for scoping (ADR 0022). A principal may name its
``subject`` (the user's id in the host): it plays no part in scoping, only in counting the streams
each principal holds (``FeedSettings.max_streams_per_principal``); without one, every user of the
scope counts as the same principal.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Literal

import attrs
from starlette.requests import HTTPConnection

from outbox_adapters.postgres.channels.feed import Scope

__all__ = ["Authenticate", "Principal"]


@attrs.frozen
class Principal:
    """A platform operator, or a user of one tenant. Build one with the named constructors."""

    kind: Literal["platform_operator", "tenant_user"]
    tenant_id: str | None = None
    #: Who within the scope (the host's user id): counted for the stream cap, never for scoping.
    subject: str | None = attrs.field(default=None, kw_only=True)

    def __attrs_post_init__(self) -> None:
        if self.kind == "platform_operator":
            if self.tenant_id is not None:
                raise ValueError("a platform operator belongs to no tenant")
        elif self.kind == "tenant_user":
            if not isinstance(self.tenant_id, str) or not self.tenant_id:
                raise ValueError("a tenant user needs a non-empty tenant id")
        else:
            raise ValueError(
                f"a principal is a platform_operator or a tenant_user, got {self.kind!r}"
            )
        if self.subject is not None and not isinstance(self.subject, str):
            raise ValueError("a principal's subject is a string (the host's user id) or None")

    @classmethod
    def platform_operator(cls, *, subject: str | None = None) -> Principal:
        return cls("platform_operator", subject=subject)

    @classmethod
    def tenant_user(cls, tenant_id: str, *, subject: str | None = None) -> Principal:
        return cls("tenant_user", tenant_id, subject=subject)

    @property
    def key(self) -> str:
        """Who holds a stream, for the per-principal cap: the scope, and the subject if named."""
        scope = self.scope.key
        return scope if self.subject is None else f"{scope}\x00{self.subject}"

    @property
    def scope(self) -> Scope:
        """The notifications this principal may read and mark: its audience's, nobody else's."""
        if self.tenant_id is None:
            return Scope.platform()
        return Scope.tenant(self.tenant_id)


#: The host's authentication: the request (or stream) in, the principal out; ``None`` → 401.
#: May be a plain function or a coroutine function.
Authenticate = Callable[[HTTPConnection], Principal | Awaitable[Principal | None] | None]
