"""Steps the webhook tests share: a repository and stores on one pool, endpoints, a drained event.

:class:`WebhookSteps` are the steps that only go through the repository and the stores, so the
contract suite's in-memory harness (tests/support/webhook_contract.py) has them too; the
PostgreSQL :class:`Webhooks` adds the host's enqueue and plain SQL reads (``rows``), so a test
checks what PostgreSQL holds.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import attrs
from psycopg_pool import AsyncConnectionPool

from outbox_adapters.http import DestinationGuard
from outbox_adapters.postgres import PostgresStore
from outbox_adapters.postgres.webhooks import (
    DELIVERY_LANE,
    WEBHOOK_LANE,
    Endpoint,
    FanOut,
    WebhookRepository,
    enqueue_webhook_async,
    outbox_webhook,
    outbox_webhook_delivery,
)
from outbox_core.backoff import SlotSchedule
from outbox_core.messages import ClaimedRow, ClaimToken, NewMessage
from outbox_core.ports import ClaimRequest
from outbox_core.signing import WebhookSecret
from outbox_core.webhook_timing import WebhookTiming

BIRTH = timedelta(seconds=120)
LEASE = timedelta(seconds=190)
#: The tenant the tests' endpoints and events belong to unless a test names another.
TENANT = "acme"

#: Local receivers over http on 127.0.0.0/8, for end-to-end webhook tests.
GUARD = DestinationGuard(allow=("127.0.0.0/8",), require_https=False)
#: Short figures so a test sees retries: 1 s attempts, a birth lease of 4 s, retries after 0.2 s.
TIMING = WebhookTiming(
    http_attempt=timedelta(seconds=1),
    mark=timedelta(seconds=1),
    birth_lease=timedelta(seconds=4),
    lease_grace=timedelta(seconds=2),
)
QUICK = SlotSchedule((timedelta(seconds=0.2),) * 3, jitter_ratio=0.0)


def token() -> ClaimToken:
    return ClaimToken.from_entropy(secrets.token_bytes(16))


def new_secret() -> str:
    return WebhookSecret.generate_from(secrets.token_bytes(32)).to_text()


class WebhookSteps:
    """Steps through the repository and the two stores alone (every backend has them)."""

    repo: Any
    outbox: Any
    deliveries: Any
    #: The secret each endpoint was registered with, by endpoint id.
    secrets: dict[int, str]

    async def enqueue(
        self,
        event_type: str = "invoice.paid",
        *,
        ordering_key: str | None = None,
        tenant: str = TENANT,
        **data: Any,
    ) -> int:
        raise NotImplementedError

    async def endpoint(
        self,
        *types: str,
        url: str = "https://hooks.example/in",
        tenant: str = TENANT,
        **kw: Any,
    ) -> int:
        secret = new_secret()
        made = await self.repo.add_endpoint(url, list(types), secret=secret, tenant=tenant, **kw)
        self.secrets[made.id] = secret
        return int(made.id)

    async def claim_outbox(self, *, now: Any = None) -> list[ClaimedRow]:
        request = ClaimRequest(lane=WEBHOOK_LANE, limit=10, lease=LEASE, token=token(), now=now)
        return list(await self.outbox.claim_due(request))

    async def claim_deliveries(
        self, *, now: Any = None, claim_token: ClaimToken | None = None
    ) -> list[ClaimedRow]:
        request = ClaimRequest(
            lane=DELIVERY_LANE, limit=10, lease=LEASE, token=claim_token or token(), now=now
        )
        return list(await self.deliveries.claim_due(request))

    async def drained(
        self, event_type: str = "invoice.paid", *, tenant: str = TENANT, **data: Any
    ) -> FanOut:
        """Enqueue one event of ``tenant``, claim it and fan it out (born token of its own)."""
        await self.enqueue(event_type, tenant=tenant, **data)
        (row,) = await self.claim_outbox()
        fan_out: FanOut = await self.repo.fan_out(row, birth_lease=BIRTH, birth_token=token())
        return fan_out


@attrs.define
class Webhooks(WebhookSteps):
    pool: AsyncConnectionPool[Any]
    repo: WebhookRepository
    outbox: PostgresStore
    deliveries: PostgresStore
    secrets: dict[int, str] = attrs.Factory(dict)

    async def enqueue(
        self,
        event_type: str = "invoice.paid",
        *,
        ordering_key: str | None = None,
        tenant: str = TENANT,
        **data: Any,
    ) -> int:
        async with self.pool.connection() as conn, conn.transaction():
            result = await enqueue_webhook_async(
                conn, event_type, data or {"invoice": 7}, ordering_key=ordering_key, tenant=tenant
            )
        return int(result.row_id)

    async def rows(self, query: str, *params: Any) -> list[tuple[Any, ...]]:
        async with self.pool.connection() as conn:
            found: list[tuple[Any, ...]] = await (await conn.execute(query, params)).fetchall()
        return found


def notice_for(endpoint: Endpoint) -> NewMessage | None:
    """The owner's notice of a disabled endpoint, as the tests' stores and sweeps send it."""
    if endpoint.owner_email is None:
        return None
    return NewMessage(
        "email",
        {"to": [endpoint.owner_email], "subject": f"endpoint {endpoint.id} disabled",
         "text": endpoint.disabled_reason or ""},
    )  # fmt: skip


@asynccontextmanager
async def webhooks(dsn: str) -> AsyncIterator[Webhooks]:
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        dsn,
        min_size=1,
        max_size=4,
        kwargs={"autocommit": True, "options": "-c lock_timeout=2000"},
        open=False,
    )
    async with pool:
        yield Webhooks(
            pool=pool,
            repo=WebhookRepository(pool),
            outbox=PostgresStore(pool, table=outbox_webhook),
            deliveries=PostgresStore(
                pool, table=outbox_webhook_delivery, endpoint_notice=notice_for
            ),
        )
