"""The webhook-repository contract suite's harnesses (tests/contract/test_webhook_repository_contract.py):
the same steps and reads over the in-memory repository and over PostgreSQL's.

Besides :class:`~tests.support.webhooks.WebhookSteps` (``repo``, ``outbox``, ``deliveries``,
``endpoint``, ``enqueue``, ``claim_outbox``, ``claim_deliveries``, ``drained``), a harness offers:

- ``await now()``: the backend's clock (PostgreSQL: ``now()``), and ``await later()``: strictly
  after every stamp so far and before every later one;
- ``await events()``: every event as ``(id, msg_id, event_type, data, source_outbox_id,
  replay_of, completed)``, by id; ``await delivery_count(event_id=None)``;
- ``await age_deliveries(days)``: every delivery's creation and resolution moved ``days`` back
  (what a health window needs; PostgreSQL: an UPDATE, memory: the rows' stamps);
- ``await mails()``: the e-mail outbox as ``(payload, idempotency_key)``;
- ``interrupted_replay(patch)``, ``failing_disable(patch)`` and ``failing_notice(patch)``: under
  them the replay's second step, a 410 mark's endpoint disable, or the owner's notice of that
  disable fails (``patch`` is a ``MonkeyPatch.context()``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from tests.support.webhooks import TENANT, Webhooks, WebhookSteps, notice_for, webhooks

from outbox_adapters.clock import FakeClock
from outbox_adapters.memory import MemoryStore, MemoryWebhookRepository
from outbox_adapters.memory.webhook_endpoints import MemoryEndpointOps
from outbox_adapters.postgres import statements
from outbox_adapters.postgres.webhooks import statements as webhook_statements
from outbox_adapters.webhook_model import webhook_message

__all__ = ["MemoryWebhooks", "PostgresWebhooks", "webhook_harness"]

CLOCK_START = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
EventRow = tuple[int, str, str, Any, int | None, int | None, bool]


def _failing(*_args: Any, **_kwargs: Any) -> Any:
    msg = "simulated_failure(): an injected failure"
    raise RuntimeError(msg)


class MemoryWebhooks(WebhookSteps):
    name = "memory"

    def __init__(self) -> None:
        self.clock = FakeClock(CLOCK_START)
        self.outbox = MemoryStore(self.clock)
        self.deliveries = MemoryStore(self.clock)
        self.email = MemoryStore(self.clock)
        self.repo = MemoryWebhookRepository(
            self.outbox, self.deliveries, email_store=self.email, gone_notice=notice_for
        )
        self.secrets = {}

    async def enqueue(
        self,
        event_type: str = "invoice.paid",
        *,
        ordering_key: str | None = None,
        tenant: str = TENANT,
        **data: Any,
    ) -> int:
        message = webhook_message(
            event_type, data or {"invoice": 7}, ordering_key=ordering_key, tenant=tenant
        )
        return int(self.outbox.enqueue(message).row_id)

    async def now(self) -> datetime:
        return self.clock.now()

    async def later(self) -> datetime:
        self.clock.advance(1)
        at = self.clock.now()
        self.clock.advance(1)
        return at

    async def events(self) -> list[EventRow]:
        return [
            (e.id, e.msg_id, e.event_type, json.loads(e.data), e.source_outbox_id, e.replay_of,
             e.replay_completed_at is not None)
            for e in self.repo.events()
        ]  # fmt: skip

    async def delivery_count(self, event_id: int | None = None) -> int:
        refs = self.repo.delivery_refs()
        return sum(1 for pair in refs.values() if event_id in (None, pair[0]))

    async def age_deliveries(self, days: int) -> None:
        back = timedelta(days=days)
        for row in self.deliveries._rows.values():
            row.created_at -= back
            if row.resolved_at is not None:
                row.resolved_at -= back

    async def mails(self) -> list[tuple[Any, str | None]]:
        return [(row.payload, row.idempotency_key) for row in self.email.rows()]

    def interrupted_replay(self, patch: pytest.MonkeyPatch) -> None:
        patch.setattr(MemoryWebhookRepository, "_born_deliveries", _failing)

    def failing_disable(self, patch: pytest.MonkeyPatch) -> None:
        patch.setattr(MemoryEndpointOps, "_disable", _failing)

    def failing_notice(self, patch: pytest.MonkeyPatch) -> None:
        patch.setattr(self.repo, "gone_notice", _failing)


class PostgresWebhooks(Webhooks):
    name = "postgres"

    async def now(self) -> datetime:
        ((now,),) = await self.rows("SELECT now()")
        at: datetime = now
        return at

    async def later(self) -> datetime:
        # clock_timestamp() is the server's time at the call (now() is the transaction's start).
        await asyncio.sleep(0.002)
        ((at,),) = await self.rows("SELECT clock_timestamp()")
        await asyncio.sleep(0.002)
        stamp: datetime = at
        return stamp

    async def events(self) -> list[EventRow]:
        found = await self.rows(
            "SELECT id, msg_id, event_type, data, source_outbox_id, replay_of,"
            " replay_completed_at IS NOT NULL FROM outbox_webhook_event ORDER BY id"
        )
        return [(r[0], r[1], r[2], r[3], r[4], r[5], r[6]) for r in found]

    async def delivery_count(self, event_id: int | None = None) -> int:
        ((count,),) = await self.rows(
            "SELECT count(*) FROM outbox_webhook_delivery"
            " WHERE %s::bigint IS NULL OR event_id = %s::bigint",
            event_id, event_id,
        )  # fmt: skip
        return int(count)

    async def age_deliveries(self, days: int) -> None:
        await self.rows(
            "UPDATE outbox_webhook_delivery SET created_at = created_at - %s::interval,"
            " resolved_at = resolved_at - %s::interval RETURNING id",
            timedelta(days=days), timedelta(days=days),
        )  # fmt: skip

    async def mails(self) -> list[tuple[Any, str | None]]:
        found = await self.rows("SELECT payload, idempotency_key FROM outbox_message ORDER BY id")
        return [(r[0], r[1]) for r in found]

    def interrupted_replay(self, patch: pytest.MonkeyPatch) -> None:
        patch.setattr(webhook_statements, "BORN_DELIVERIES", "SELECT simulated_failure()")

    def failing_disable(self, patch: pytest.MonkeyPatch) -> None:
        patch.setattr(statements, "DISABLE_ENDPOINTS", "SELECT simulated_failure()")

    def failing_notice(self, patch: pytest.MonkeyPatch) -> None:
        # Raised after the mark and the disable ran, inside their transaction.
        patch.setattr(self.deliveries, "_endpoint_notice", _failing)


@asynccontextmanager
async def webhook_harness(dsn: str | None) -> AsyncIterator[MemoryWebhooks | PostgresWebhooks]:
    """The in-memory harness (``dsn`` None), or PostgreSQL's on ``dsn`` (every table emptied)."""
    if dsn is None:
        yield MemoryWebhooks()
        return
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "TRUNCATE outbox_message, outbox_webhook, outbox_webhook_delivery,"
            " outbox_webhook_event, outbox_webhook_secret, outbox_webhook_endpoint,"
            " outbox_stale_marks RESTART IDENTITY CASCADE"
        )
    async with webhooks(dsn) as made:
        yield PostgresWebhooks(made.pool, made.repo, made.outbox, made.deliveries)
