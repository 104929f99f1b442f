"""Who is asking: the principal the host's authentication hands the feed, and the scope it sees.

The feed never authenticates anyone itself. The host passes an :data:`Authenticate` callable that
reads ITS session, token or header and answers a :class:`Principal` (or ``None``: 401). The scope of
every query and every stream comes from that principal and from nothing else: no query parameter,
path segment or header is ever consulted for scoping (ADR 0022).
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

    @classmethod
    def platform_operator(cls) -> Principal:
        return cls("platform_operator")

    @classmethod
    def tenant_user(cls, tenant_id: str) -> Principal:
        return cls("tenant_user", tenant_id)

    @property
    def scope(self) -> Scope:
        """The notifications this principal may read and mark: its audience's, nobody else's."""
        if self.tenant_id is None:
            return Scope.platform()
        return Scope.tenant(self.tenant_id)


#: The host's authentication: the request (or stream) in, the principal out; ``None`` → 401.
#: May be a plain function or a coroutine function.
Authenticate = Callable[[HTTPConnection], Principal | Awaitable[Principal | None] | None]
