"""``outbox schema apply`` on a database an earlier release made, before endpoints and events had
a tenant: the DDL adds the columns, then one transaction gives every existing endpoint, event and
pending webhook outbox row the named tenant and adds the ``tenant IS NOT NULL`` checks, so the
endpoints keep receiving what they did (a pending event of the old shape still fans out) and a
second apply changes nothing. Also: the tenant an enqueue must name.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool
from tests.support.cli import outbox
from tests.support.webhooks import BIRTH, LEASE, new_secret, token

from outbox_adapters.postgres import PostgresStore, schema
from outbox_adapters.postgres.webhooks import (
    WEBHOOK_LANE,
    WebhookRepository,
    enqueue_webhook,
    outbox_webhook,
)
from outbox_core.errors import InvalidMessage
from outbox_core.ports import ClaimRequest

pytestmark = pytest.mark.integration

#: What the tenant steps take away: the columns, their indexes and checks (dropped with them).
EARLIER_RELEASE = (
    "ALTER TABLE outbox_webhook_endpoint DROP COLUMN tenant",
    "ALTER TABLE outbox_webhook_event DROP COLUMN tenant",
)


@pytest.fixture
def private(postgres_dsn: str) -> Iterator[str]:
    """A schema of its own (dropping columns here can't disturb other tests), as an earlier
    release made it, holding one endpoint, one fanned-out event and one pending event."""
    name = f"tenants_{secrets.token_hex(4)}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {name}")
    dsn = psycopg.conninfo.make_conninfo(postgres_dsn, options=f"-c search_path={name}")
    try:
        schema.apply(dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            for statement in EARLIER_RELEASE:
                conn.execute(statement)
            conn.execute(
                "INSERT INTO outbox_webhook_endpoint (url, event_types) VALUES"
                " ('https://hooks.example/in', ARRAY['invoice.paid'])"
            )
            conn.execute(
                "INSERT INTO outbox_webhook_event (msg_id, event_type, data)"
                " VALUES ('msg_0123456789abcdef0123456789abcdef', 'invoice.paid', '{}')"
            )
            conn.execute(
                "INSERT INTO outbox_webhook (lane, payload) VALUES (%s, %s::jsonb)",
                (WEBHOOK_LANE, json.dumps({"event_type": "invoice.paid", "data": {"n": 1}})),
            )
        yield dsn
    finally:
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {name} CASCADE")


def test_schema_apply_gives_an_earlier_releases_rows_one_named_tenant_in_one_go(private):
    problems = schema.verify(private)
    assert "column outbox_webhook_endpoint.tenant is missing" in problems
    assert "column outbox_webhook_event.tenant is missing" in problems

    applied = outbox("schema", "apply", "--database-url", private, "--existing-tenant", "legacy")
    assert applied.exit_code == 0, applied.output
    assert "upgraded: 1 endpoints given the tenant 'legacy'" in applied.stdout
    assert "upgraded: 1 events given the tenant 'legacy'" in applied.stdout
    assert "upgraded: 1 pending webhook outbox rows given the tenant 'legacy'" in applied.stdout
    assert schema.verify(private) == []
    with psycopg.connect(private) as conn:
        assert conn.execute("SELECT tenant FROM outbox_webhook_endpoint").fetchall() == [
            ("legacy",)
        ]
        assert conn.execute("SELECT tenant FROM outbox_webhook_event").fetchall() == [("legacy",)]
        with pytest.raises(
            psycopg.errors.CheckViolation, match="ck_outbox_webhook_endpoint_tenant"
        ):
            conn.execute(
                "INSERT INTO outbox_webhook_endpoint (url, event_types) VALUES ('x', ARRAY['y'])"
            )

    again = outbox("schema", "apply", "--database-url", private, "--existing-tenant", "other")
    assert again.exit_code == 0, again.output
    assert "upgraded" not in again.stdout  # nothing left to upgrade
    with psycopg.connect(private) as conn:
        tenants = conn.execute(
            "SELECT tenant FROM outbox_webhook_endpoint UNION ALL SELECT tenant FROM outbox_webhook_event"
        ).fetchall()
    assert tenants == [("legacy",), ("legacy",)]


async def test_the_pending_event_of_an_earlier_release_fans_out_to_its_old_endpoint(private):
    schema.apply(private, existing_tenant="legacy")
    async with AsyncConnectionPool(private, kwargs={"autocommit": True}, open=False) as pool:
        repository = WebhookRepository(pool)
        newer = await repository.add_endpoint(
            "https://hooks.example/other", ["invoice.paid"], tenant="acme", secret=new_secret()
        )
        outbox_store = PostgresStore(pool, table=outbox_webhook)
        (row,) = await outbox_store.claim_due(
            ClaimRequest(lane=WEBHOOK_LANE, limit=5, lease=LEASE, token=token())
        )
        fan = await repository.fan_out(row, birth_lease=BIRTH, birth_token=token())
        (old,) = await repository.list_endpoints(tenant="legacy")
    assert [d.payload for d in fan.deliveries] == [
        {"event_id": fan.event_id, "endpoint_id": old.id}
    ]
    assert newer.id != old.id


def test_schema_apply_refuses_an_unusable_existing_tenant_before_touching_the_database(private):
    refused = outbox("schema", "apply", "--database-url", private, "--existing-tenant", "")
    assert refused.exit_code == 2
    assert "tenant is 1 to 200 characters" in refused.stderr
    assert "column outbox_webhook_endpoint.tenant is missing" in schema.verify(private)


@pytest.mark.usefixtures("empty_outbox")
def test_an_enqueue_without_a_usable_tenant_is_refused_and_writes_nothing(dsn):
    with psycopg.connect(dsn) as conn:
        with conn.transaction():
            for bad in (None, "", "a\nb", "x" * 201):
                with pytest.raises(InvalidMessage, match="tenant"):
                    enqueue_webhook(conn, "invoice.paid", {"n": 1}, tenant=bad)  # type: ignore[arg-type]
        assert conn.execute("SELECT count(*) FROM outbox_webhook").fetchone() == (0,)
    refused = outbox(
        "enqueue", "webhook", "--database-url", dsn, "--event-type", "invoice.paid",
        "--data", "{}",
    )  # fmt: skip
    assert refused.exit_code == 2
    assert "--tenant" in refused.stderr
