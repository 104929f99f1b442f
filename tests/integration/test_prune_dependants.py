"""``outbox prune`` never deletes what another promise still reads (docs/deployment.md, ADR 0025):
the e-mail channel's sent rows (its dedup record while the broker may redeliver the event), read
notifications (the in-app channel's), and each endpoint's newest successful delivery (where the
health sweep's failure streak starts).

Each test prunes the way an operator would, through the CLI, then does what the deleted rows were
needed for: a broker redelivery of the event (0 duplicate e-mails) and a health sweep (0 wrong
disables).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
from psycopg_pool import AsyncConnectionPool
from tests.support import smtp as smtp_support
from tests.support.channels import (
    channel_pool,
    email_workers,
    publish,
    rows_of,
    tenant_event,
    wire,
)
from tests.support.cli import one_line_error, outbox
from tests.support.postgres import query
from tests.support.webhooks import Webhooks

from outbox_adapters.demo.sink import SmtpSink
from outbox_adapters.memory import MemoryBroker
from outbox_adapters.smtp import SmtpMailer

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("empty_outbox")]


@pytest.fixture
async def pool(dsn: str) -> AsyncIterator[AsyncConnectionPool[Any]]:
    async with channel_pool(dsn) as made:
        yield made


@pytest.fixture
async def mailer(sink: SmtpSink) -> AsyncIterator[SmtpMailer]:
    made = smtp_support.mailer_for(sink)
    yield made
    await made.aclose()


def _age(dsn: str, table: str, days: int, where: str = "true") -> None:
    query(
        dsn,
        f"UPDATE {table} SET resolved_at = now() - make_interval(days => %s),"  # noqa: S608 - ours
        f" created_at = now() - make_interval(days => %s) WHERE {where} RETURNING 1",
        days,
        days,
    )


async def test_a_prune_under_the_broker_s_retention_keeps_the_channel_s_dedup_rows(
    dsn: str, pool: AsyncConnectionPool[Any], sink: SmtpSink, mailer: SmtpMailer, lane: str
) -> None:
    broker = MemoryBroker()
    event = tenant_event()
    await publish(broker, wire(event))
    await email_workers(pool, broker, mailer, lane).run(drain=True)
    sent = len(sink.handler.snapshot())
    assert sent == 2  # the welcome and the owner's notice
    _age(dsn, "outbox_message", 2, f"lane = '{lane}'")  # sent two days ago: within the retention

    everyday = outbox("prune", "--database-url", dsn, "--older-than", "1d", "--json")
    assert everyday.exit_code == 0, everyday.output
    assert "messages" not in json.loads(everyday.stdout)["removed"]
    refused = outbox(
        "prune", "--database-url", dsn, "--older-than", "1d", "--only", "messages"
    )  # fmt: skip
    assert refused.exit_code == 2
    said = one_line_error(refused)
    assert "--older-than 1d" in said
    assert "7d" in said
    assert "--broker-retention" in said
    feed = outbox("feed", "prune", "--database-url", dsn, "--older-than", "2d")
    assert feed.exit_code == 2
    assert "7d" in one_line_error(feed)
    assert len(await rows_of(pool, lane)) == 2

    # The broker redelivers the event (a consumer group reset, a replay within the retention).
    await publish(broker, wire(event, message_id=f"{event.id}#again"))
    await email_workers(pool, broker, mailer, lane).run(drain=True)
    assert len(sink.handler.snapshot()) == sent  # 0 duplicate e-mails

    # Past the retention, the operator may prune them when named.
    past = outbox(
        "prune", "--database-url", dsn, "--older-than", "1d", "--only", "messages",
        "--broker-retention", "1d", "--json",
    )  # fmt: skip
    assert past.exit_code == 0, past.output
    assert json.loads(past.stdout)["removed"] == {"messages": 2}


async def test_pruned_deliveries_keep_each_endpoint_s_newest_success_for_the_health_sweep(
    dsn: str, wh: Webhooks
) -> None:
    """An endpoint that failed once 20 days ago, then delivered every day until 3 days ago, and
    failed once an hour ago. A prune of deliveries older than 2 days used to delete every success,
    so the sweep saw a failure streak 20 days long and disabled a healthy endpoint."""
    endpoint = await wh.endpoint("invoice.paid")
    made = [(await wh.drained()).deliveries for _ in range(6)]
    old_failure, *successes, recent_failure = [int(d.id) for (d,) in made]
    query(
        dsn,
        "UPDATE outbox_webhook_delivery SET status = 'failed', last_error = 'HTTP 500',"
        " created_at = now() - interval '20 days', updated_at = now() - interval '20 days'"
        " WHERE id = %s RETURNING 1",
        old_failure,
    )
    for n, delivery in enumerate(successes):
        days = 3 + n
        query(
            dsn,
            "UPDATE outbox_webhook_delivery SET status = 'dispatched', last_error = NULL,"
            " created_at = now() - make_interval(days => %s),"
            " resolved_at = now() - make_interval(days => %s) WHERE id = %s RETURNING 1",
            days,
            days,
            delivery,
        )
    query(
        dsn,
        "UPDATE outbox_webhook_delivery SET status = 'pending', last_error = 'HTTP 503',"
        " created_at = now() - interval '1 hour', updated_at = now() WHERE id = %s RETURNING 1",
        recent_failure,
    )

    pruned = outbox("prune", "--database-url", dsn, "--older-than", "2d", "--json")
    assert pruned.exit_code == 0, pruned.output
    assert json.loads(pruned.stdout)["removed"]["deliveries"] == len(successes) - 1
    newest = successes[0]
    assert query(dsn, "SELECT id FROM outbox_webhook_delivery WHERE status = 'dispatched'") == [
        (newest,)
    ]

    disabled = await wh.repo.disable_unhealthy(window=timedelta(days=1), notice=lambda _e: None)
    assert disabled == []  # 0 wrong disables
    assert query(dsn, "SELECT enabled FROM outbox_webhook_endpoint WHERE id = %s", endpoint) == [
        (True,)
    ]
