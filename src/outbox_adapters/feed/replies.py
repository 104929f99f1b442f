"""What every route of the feed shares: the principal's scope, and the JSON error reply."""

from __future__ import annotations

import inspect

from starlette.requests import HTTPConnection
from starlette.responses import JSONResponse

from outbox_adapters.feed.principal import Authenticate
from outbox_adapters.postgres.channels.feed import Scope

__all__ = ["error", "principal_scope"]


def error(status: int, message: str) -> JSONResponse:
    """``{"error": message}``: a sentence naming what is wrong."""
    return JSONResponse({"error": message}, status_code=status)


async def principal_scope(authenticate: Authenticate, connection: HTTPConnection) -> Scope | None:
    """The scope of the principal the host authenticated; ``None`` when there is none (401).

    Only the host's answer counts: nothing of the request is read here.
    """
    answer = authenticate(connection)
    principal = await answer if inspect.isawaitable(answer) else answer
    return None if principal is None else principal.scope
