"""The webhook host API: one tenant's endpoints, deliveries and events, in the host's transaction.

::

    hooks = AsyncTenantWebhooks("acme", guard=DestinationGuard())   # TenantWebhooks: sync twin
    async with conn.transaction():
        made = await hooks.create_endpoint(conn, "https://acme.example/hooks", ["invoice.*"])
        show_once(made.verify_with)                                  # whsec_... (or whpk_...)

Every method takes the host's handle first (a psycopg connection, or a SQLAlchemy connection or
session on the psycopg driver) and runs there: a write needs an open transaction and commits or
rolls back with the host's own rows (``TransactionRequired`` otherwise); nothing here commits.
Each object is bound to one tenant and can only read or change that tenant's rows: another
tenant's endpoint or event id is refused exactly as a missing one (``WebhookRefused: there is no
webhook endpoint N``). The rules are the repository's (ADR 0017): input checks
(``InvalidMessage``), the destination guard at create and at a URL change (``BlockedDestination``;
the guard resolves the host name, so the sync twin runs the check in a short event loop of its
own), signing secrets sealed with ``encryptor`` when given (ADR 0030). The operations themselves
are :mod:`.tenant_ops`, written once for both.

``update_endpoint`` changes what it is given: an argument left at :data:`UNCHANGED` stays as it
is, ``None`` clears a description or a rate cap. ``replay`` and ``send_test_event`` make due
deliveries for the delivery lane (the running ``outbox worker --lane webhooks`` sends them) and
wake it when the host commits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import timedelta
from typing import Protocol

from outbox_adapters.postgres.handles import run, run_async
from outbox_adapters.postgres.webhooks import tenant_ops as ops
from outbox_adapters.postgres.webhooks.tenant_values import (
    UNCHANGED,
    AttemptView,
    CreatedEndpoint,
    DeliveryView,
    TestEvent,
    Unchanged,
)
from outbox_adapters.webhook_model import (
    DEFAULT_SECRET_OVERLAP,
    Endpoint,
    EndpointHealth,
    Missed,
    Replay,
)
from outbox_adapters.webhook_scope import check_tenant
from outbox_core.errors import ConfigurationError
from outbox_core.ports import Encryptor


class Guard(Protocol):
    """What checks an endpoint URL before it is stored: the webhook lane's
    :class:`~outbox_adapters.http.DestinationGuard` (ADR 0016)."""

    async def check_registration(self, url: str) -> None: ...


__all__ = [
    "UNCHANGED",
    "AsyncTenantWebhooks",
    "AttemptView",
    "CreatedEndpoint",
    "DeliveryView",
    "Guard",
    "TenantWebhooks",
    "TestEvent",
]


class _Tenant:
    def __init__(
        self,
        tenant: str,
        *,
        guard: Guard | None = None,
        encryptor: Encryptor | None = None,
    ) -> None:
        self.tenant = check_tenant(tenant)
        #: ``None``: URLs are checked for their shape only (the worker's guard still refuses a
        #: blocked address at every connect). Pass the workers' guard to refuse them up front.
        self.guard = guard
        self.encryptor = encryptor

    def __repr__(self) -> str:
        return f"{type(self).__name__}(tenant={self.tenant!r})"


class AsyncTenantWebhooks(_Tenant):
    """One tenant's webhooks on an async handle (module docstring)."""

    async def _check_url(self, url: object) -> None:
        if self.guard is not None and isinstance(url, str):
            await self.guard.check_registration(url)

    async def create_endpoint(  # noqa: PLR0913 - keyword-only settings of one endpoint
        self,
        conn: object,
        url: str,
        event_types: Sequence[str],
        *,
        description: str | None = None,
        owner_email: str | None = None,
        scheme: str = "v1",
        max_per_second: int | None = None,
    ) -> CreatedEndpoint:
        """Register an endpoint of this tenant with a fresh signing secret (``v1``) or Ed25519
        key (``v1a``); ``verify_with`` is what its receiver verifies with, shown this once."""
        await self._check_url(url)
        operation = ops.create_endpoint(
            self.tenant, url, event_types, description=description, owner_email=owner_email,
            scheme=scheme, max_per_second=max_per_second, encryptor=self.encryptor,
        )  # fmt: skip
        return await run_async(conn, operation, writes=True)

    async def list_endpoints(self, conn: object) -> list[Endpoint]:
        return await run_async(conn, ops.list_endpoints(self.tenant), writes=False)

    async def get_endpoint(self, conn: object, endpoint_id: int) -> Endpoint:
        return await run_async(conn, ops.get_endpoint(self.tenant, endpoint_id), writes=False)

    async def update_endpoint(  # noqa: PLR0913 - one keyword per field that may change
        self,
        conn: object,
        endpoint_id: int,
        *,
        url: str | Unchanged = UNCHANGED,
        event_types: Sequence[str] | Unchanged = UNCHANGED,
        description: str | Unchanged | None = UNCHANGED,
        max_per_second: int | Unchanged | None = UNCHANGED,
    ) -> Endpoint:
        await self._check_url(url)
        operation = ops.update_endpoint(
            self.tenant, endpoint_id, url=url, event_types=event_types,
            description=description, max_per_second=max_per_second,
        )  # fmt: skip
        return await run_async(conn, operation, writes=True)

    async def disable_endpoint(self, conn: object, endpoint_id: int, reason: str) -> Endpoint:
        operation = ops.disable_endpoint(self.tenant, endpoint_id, reason)
        return await run_async(conn, operation, writes=True)

    async def enable_endpoint(self, conn: object, endpoint_id: int) -> Missed:
        return await run_async(conn, ops.enable_endpoint(self.tenant, endpoint_id), writes=True)

    async def rotate_secret(
        self, conn: object, endpoint_id: int, *, overlap: timedelta = DEFAULT_SECRET_OVERLAP
    ) -> str:
        """A new secret (or key) signs from now; the live ones keep signing beside it for
        ``overlap``. Returns what the receiver verifies with."""
        operation = ops.rotate_secret(
            self.tenant, endpoint_id, overlap=overlap, encryptor=self.encryptor
        )
        return await run_async(conn, operation, writes=True)

    async def reveal_secret(self, conn: object, endpoint_id: int) -> str:
        """The newest live secret's ``whsec_`` text, or a ``v1a`` key's ``whpk_`` public key."""
        operation = ops.reveal_secret(self.tenant, endpoint_id, encryptor=self.encryptor)
        return await run_async(conn, operation, writes=False)

    async def health(self, conn: object, endpoint_id: int) -> EndpointHealth:
        """Last success, last failure, the failure streak since the last success, and whether
        and why it is disabled."""
        return await run_async(conn, ops.health(self.tenant, endpoint_id), writes=False)

    async def delete_endpoint(self, conn: object, endpoint_id: int) -> None:
        """The endpoint, its secrets and its deliveries; nothing more is sent to it."""
        await run_async(conn, ops.delete_endpoint(self.tenant, endpoint_id), writes=True)

    async def deliveries(
        self,
        conn: object,
        endpoint_id: int,
        *,
        status: str | None = None,
        limit: int = 50,
        before_id: int | None = None,
    ) -> list[DeliveryView]:
        """The endpoint's deliveries, newest first, each with its last attempts
        (``attempts_log``); ``before_id`` pages back."""
        operation = ops.deliveries(
            self.tenant, endpoint_id, status=status, limit=limit, before_id=before_id
        )
        return await run_async(conn, operation, writes=False)

    async def replay(
        self, conn: object, event_id: int, *, endpoint_id: int | None = None
    ) -> Replay:
        """Send an event of this tenant again: to ``endpoint_id``, or to every enabled endpoint of
        the tenant subscribed to its type (a new ``webhook-id``)."""
        operation = ops.replay(self.tenant, event_id, endpoint_id=endpoint_id)
        return await run_async(conn, operation, writes=True)

    async def send_test_event(self, conn: object, endpoint_id: int) -> TestEvent:
        """A ``webhook.test`` event to this endpoint only, whatever it subscribes to."""
        operation = ops.send_test_event(self.tenant, endpoint_id)
        return await run_async(conn, operation, writes=True)


class TenantWebhooks(_Tenant):
    """One tenant's webhooks on a sync handle: :class:`AsyncTenantWebhooks`' methods, blocking."""

    def _check_url(self, url: object) -> None:
        if self.guard is None or not isinstance(url, str):
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            asyncio.run(self.guard.check_registration(url))
            return
        raise ConfigurationError(
            "TenantWebhooks checks a URL in an event loop of its own, and this thread runs one"
            " already: use AsyncTenantWebhooks in async code"
        )

    def create_endpoint(  # noqa: PLR0913 - keyword-only settings of one endpoint
        self,
        conn: object,
        url: str,
        event_types: Sequence[str],
        *,
        description: str | None = None,
        owner_email: str | None = None,
        scheme: str = "v1",
        max_per_second: int | None = None,
    ) -> CreatedEndpoint:
        self._check_url(url)
        operation = ops.create_endpoint(
            self.tenant, url, event_types, description=description, owner_email=owner_email,
            scheme=scheme, max_per_second=max_per_second, encryptor=self.encryptor,
        )  # fmt: skip
        return run(conn, operation, writes=True)

    def list_endpoints(self, conn: object) -> list[Endpoint]:
        return run(conn, ops.list_endpoints(self.tenant), writes=False)

    def get_endpoint(self, conn: object, endpoint_id: int) -> Endpoint:
        return run(conn, ops.get_endpoint(self.tenant, endpoint_id), writes=False)

    def update_endpoint(  # noqa: PLR0913 - one keyword per field that may change
        self,
        conn: object,
        endpoint_id: int,
        *,
        url: str | Unchanged = UNCHANGED,
        event_types: Sequence[str] | Unchanged = UNCHANGED,
        description: str | Unchanged | None = UNCHANGED,
        max_per_second: int | Unchanged | None = UNCHANGED,
    ) -> Endpoint:
        self._check_url(url)
        operation = ops.update_endpoint(
            self.tenant, endpoint_id, url=url, event_types=event_types,
            description=description, max_per_second=max_per_second,
        )  # fmt: skip
        return run(conn, operation, writes=True)

    def disable_endpoint(self, conn: object, endpoint_id: int, reason: str) -> Endpoint:
        return run(conn, ops.disable_endpoint(self.tenant, endpoint_id, reason), writes=True)

    def enable_endpoint(self, conn: object, endpoint_id: int) -> Missed:
        return run(conn, ops.enable_endpoint(self.tenant, endpoint_id), writes=True)

    def rotate_secret(
        self, conn: object, endpoint_id: int, *, overlap: timedelta = DEFAULT_SECRET_OVERLAP
    ) -> str:
        operation = ops.rotate_secret(
            self.tenant, endpoint_id, overlap=overlap, encryptor=self.encryptor
        )
        return run(conn, operation, writes=True)

    def reveal_secret(self, conn: object, endpoint_id: int) -> str:
        operation = ops.reveal_secret(self.tenant, endpoint_id, encryptor=self.encryptor)
        return run(conn, operation, writes=False)

    def health(self, conn: object, endpoint_id: int) -> EndpointHealth:
        return run(conn, ops.health(self.tenant, endpoint_id), writes=False)

    def delete_endpoint(self, conn: object, endpoint_id: int) -> None:
        run(conn, ops.delete_endpoint(self.tenant, endpoint_id), writes=True)

    def deliveries(
        self,
        conn: object,
        endpoint_id: int,
        *,
        status: str | None = None,
        limit: int = 50,
        before_id: int | None = None,
    ) -> list[DeliveryView]:
        """The endpoint's deliveries, newest first, each with its last attempts
        (``attempts_log``); ``before_id`` pages back."""
        operation = ops.deliveries(
            self.tenant, endpoint_id, status=status, limit=limit, before_id=before_id
        )
        return run(conn, operation, writes=False)

    def replay(self, conn: object, event_id: int, *, endpoint_id: int | None = None) -> Replay:
        return run(conn, ops.replay(self.tenant, event_id, endpoint_id=endpoint_id), writes=True)

    def send_test_event(self, conn: object, endpoint_id: int) -> TestEvent:
        return run(conn, ops.send_test_event(self.tenant, endpoint_id), writes=True)
