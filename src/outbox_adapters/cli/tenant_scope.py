"""``--tenant`` on the ``outbox endpoints`` commands that act on one endpoint: with it, the endpoint
must be that tenant's, and an endpoint of another tenant is refused exactly as a missing one
(``there is no webhook endpoint N``), before the command does anything."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from outbox_adapters.cli.options import Failure, connection_pool, run, tenant_option
from outbox_adapters.postgres.webhooks import WebhookRepository
from outbox_adapters.webhook_model import refused_no_endpoint

__all__ = ["for_tenant"]

F = TypeVar("F", bound=Callable[..., Any])


async def _owner(database_url: str, endpoint_id: int) -> str | None:
    async with connection_pool(database_url) as pool:
        endpoint = await WebhookRepository(pool).endpoint(endpoint_id)
    return None if endpoint is None else endpoint.tenant


def for_tenant(command: F) -> F:
    """Add ``--tenant`` to a command taking ``endpoint_id`` and ``database_url``, and refuse an
    endpoint that is not the tenant's."""

    @functools.wraps(command)
    def scoped(*args: Any, tenant: str | None, **kwargs: Any) -> Any:  # noqa: ANN401 - click's
        if tenant is not None:
            endpoint_id = kwargs["endpoint_id"]
            if run(_owner(kwargs["database_url"], endpoint_id)) != tenant:
                raise Failure(str(refused_no_endpoint(endpoint_id)))
        return command(*args, **kwargs)

    return tenant_option(
        required=False, help_text="The endpoint must be this tenant's (refused otherwise)."
    )(scoped)  # type: ignore[return-value]
