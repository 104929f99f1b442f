"""The webhook host API (``TenantWebhooks`` / ``AsyncTenantWebhooks``, docs/guides/webhooks.md
"The host API") on PostgreSQL, in the host's own transaction:

- every operation, async on psycopg and sync on psycopg and on a SQLAlchemy session;
- writes need the host's transaction and roll back with it;
- the destination guard at create and at a URL change; secrets sealed with keys, revealed opened;
- one tenant's object can't see or change another tenant's rows: every id of theirs is refused as
  a missing one, and their rows are byte for byte as they were;
- a test event and a replay are sent by the webhook lane's real workers to a local receiver,
  signed with the revealed secret.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
import standardwebhooks
from sqlalchemy import create_engine
from sqlalchemy.orm import Session
from tests.integration.test_webhook_lanes import workers
from tests.support.postgres import query
from tests.support.receivers import HttpReceiver
from tests.support.webhooks import GUARD, Webhooks

from outbox_adapters.crypto import AesGcmEncryptor
from outbox_adapters.http import DestinationGuard, HttpxWebhookSender
from outbox_adapters.postgres.enqueue import TransactionRequired
from outbox_adapters.postgres.webhooks import (
    UNCHANGED,
    AsyncTenantWebhooks,
    AttemptView,
    TenantWebhooks,
    WebhookRefused,
)
from outbox_core.delivery import Status
from outbox_core.errors import BlockedDestination, InvalidMessage
from outbox_core.signing import WebhookSecret

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("empty_outbox")]

URL = "http://127.0.0.1:9/hook"


def acme(**kw: Any) -> AsyncTenantWebhooks:
    return AsyncTenantWebhooks("acme", guard=GUARD, **kw)


async def in_tx(wh: Webhooks, call: Any) -> Any:
    async with wh.pool.connection() as conn, conn.transaction():
        return await call(conn)


async def test_the_async_api_creates_updates_disables_enables_rotates_reveals_and_deletes(
    wh: Webhooks,
) -> None:
    hooks = acme()
    made = await in_tx(
        wh,
        lambda c: hooks.create_endpoint(
            c, URL, ["invoice.*"], description="Billing", owner_email="ops@acme.example"
        ),
    )
    endpoint = made.endpoint
    assert (endpoint.tenant, endpoint.event_types, endpoint.description) == (
        "acme", ("invoice.*",), "Billing",
    )  # fmt: skip
    assert made.verify_with.startswith("whsec_")
    assert "whsec_" not in repr(made)
    assert await in_tx(wh, lambda c: hooks.reveal_secret(c, endpoint.id)) == made.verify_with
    assert [e.id for e in await in_tx(wh, hooks.list_endpoints)] == [endpoint.id]

    updated = await in_tx(
        wh,
        lambda c: hooks.update_endpoint(
            c, endpoint.id, url=URL + "/v2", event_types=["invoice.paid"], max_per_second=5
        ),
    )
    assert (updated.url, updated.event_types, updated.max_per_second) == (
        URL + "/v2", ("invoice.paid",), 5,
    )  # fmt: skip
    assert updated.description == "Billing"  # UNCHANGED by default
    cleared = await in_tx(
        wh, lambda c: hooks.update_endpoint(c, endpoint.id, description=None, max_per_second=None)
    )
    assert (cleared.description, cleared.max_per_second, cleared.url) == (None, None, URL + "/v2")

    disabled = await in_tx(wh, lambda c: hooks.disable_endpoint(c, endpoint.id, "maintenance"))
    assert (disabled.enabled, disabled.disabled_reason) == (False, "maintenance")
    enabled = await in_tx(wh, lambda c: hooks.enable_endpoint(c, endpoint.id))
    assert enabled.endpoint.enabled

    rotated = await in_tx(
        wh, lambda c: hooks.rotate_secret(c, endpoint.id, overlap=timedelta(hours=1))
    )
    assert rotated != made.verify_with
    assert await in_tx(wh, lambda c: hooks.reveal_secret(c, endpoint.id)) == rotated
    assert query(wh_dsn(wh), "SELECT count(*) FROM outbox_webhook_secret") == [(2,)]

    await in_tx(wh, lambda c: hooks.delete_endpoint(c, endpoint.id))
    assert await in_tx(wh, hooks.list_endpoints) == []
    assert query(wh_dsn(wh), "SELECT count(*) FROM outbox_webhook_secret") == [(0,)]
    with pytest.raises(WebhookRefused, match=f"there is no webhook endpoint {endpoint.id}"):
        await in_tx(wh, lambda c: hooks.get_endpoint(c, endpoint.id))


def wh_dsn(wh: Webhooks) -> str:
    return str(wh.pool.conninfo)


async def test_a_v1a_endpoint_hands_out_its_public_key_and_its_secret_is_sealed_with_keys(
    wh: Webhooks,
) -> None:
    encryptor = AesGcmEncryptor({"k1": b"\x11" * 32}, active="k1")
    hooks = acme(encryptor=encryptor)
    made = await in_tx(wh, lambda c: hooks.create_endpoint(c, URL, ["*"], scheme="v1a"))
    assert made.verify_with.startswith("whpk_")
    assert await in_tx(wh, lambda c: hooks.reveal_secret(c, made.endpoint.id)) == made.verify_with
    (stored,) = query(wh_dsn(wh), "SELECT secret FROM outbox_webhook_secret")
    assert not stored[0].startswith(("whsk_", "whsec_"))  # sealed, not plaintext
    v1 = await in_tx(wh, lambda c: hooks.create_endpoint(c, URL, ["*"]))
    assert await in_tx(wh, lambda c: hooks.reveal_secret(c, v1.endpoint.id)) == v1.verify_with


async def test_writes_need_the_hosts_transaction_and_roll_back_with_it(wh: Webhooks) -> None:
    hooks = acme()
    async with wh.pool.connection() as conn:  # autocommit, no transaction open
        with pytest.raises(TransactionRequired):
            await hooks.create_endpoint(conn, URL, ["*"])

    async def business_write_fails(conn: Any) -> None:
        await hooks.create_endpoint(conn, URL, ["*"])
        raise RuntimeError("the host's business write failed")

    with pytest.raises(RuntimeError, match="the host's business write failed"):
        await in_tx(wh, business_write_fails)
    assert query(wh_dsn(wh), "SELECT count(*) FROM outbox_webhook_endpoint") == [(0,)]
    async with wh.pool.connection() as conn:
        with pytest.raises(TypeError, match="asynchronous"):
            TenantWebhooks("acme").list_endpoints(conn)


async def test_bad_input_and_blocked_destinations_are_refused_before_anything_is_written(
    wh: Webhooks,
) -> None:
    strict = AsyncTenantWebhooks("acme", guard=DestinationGuard())
    with pytest.raises(BlockedDestination):
        await in_tx(wh, lambda c: strict.create_endpoint(c, "https://127.0.0.1/x", ["*"]))
    hooks = acme()
    with pytest.raises(InvalidMessage, match="event type"):
        await in_tx(wh, lambda c: hooks.create_endpoint(c, URL, ["*.paid"]))
    with pytest.raises(InvalidMessage, match="description"):
        await in_tx(wh, lambda c: hooks.create_endpoint(c, URL, ["*"], description="a\x00b"))
    made = await in_tx(wh, lambda c: hooks.create_endpoint(c, URL, ["*"]))
    with pytest.raises(BlockedDestination):
        await in_tx(
            wh, lambda c: strict.update_endpoint(c, made.endpoint.id, url="https://10.0.0.1/x")
        )
    for bad in (0, -1, "1", True, None):
        with pytest.raises(InvalidMessage, match="endpoint id"):
            await in_tx(wh, lambda c, bad=bad: hooks.get_endpoint(c, bad))
    with pytest.raises(InvalidMessage, match="1 to 500"):
        await in_tx(wh, lambda c: hooks.deliveries(c, made.endpoint.id, limit=0))
    with pytest.raises(InvalidMessage, match="tenant"):
        AsyncTenantWebhooks("")
    assert query(wh_dsn(wh), "SELECT url FROM outbox_webhook_endpoint") == [(URL,)]
    assert UNCHANGED is not None


@pytest.fixture
def session(wh: Webhooks) -> Iterator[Session]:
    engine = create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(wh_dsn(wh)))
    with Session(engine) as made:
        yield made
    engine.dispose()


def test_the_sync_api_runs_on_psycopg_and_on_a_sqlalchemy_session(
    wh: Webhooks, session: Session
) -> None:
    hooks = TenantWebhooks("acme", guard=GUARD)
    with psycopg.connect(wh_dsn(wh)) as conn, conn.transaction():
        made = hooks.create_endpoint(conn, URL, ["invoice.paid"])
        test = hooks.send_test_event(conn, made.endpoint.id)
    with session.begin():
        (listed,) = hooks.list_endpoints(session)
        assert listed.id == made.endpoint.id
        (delivery,) = hooks.deliveries(session, made.endpoint.id)
        assert (delivery.id, delivery.event_type, delivery.status) == (
            test.delivery_id, "webhook.test", Status.PENDING,
        )  # fmt: skip
        hooks.update_endpoint(session, made.endpoint.id, description="via SQLAlchemy")
    with psycopg.connect(wh_dsn(wh)) as conn:
        assert hooks.get_endpoint(conn, made.endpoint.id).description == "via SQLAlchemy"


def snapshot(dsn: str, tenant: str) -> list[Any]:
    """Everything of ``tenant``'s: endpoints, secrets, events and deliveries, as stored."""
    return [
        query(dsn, "SELECT * FROM outbox_webhook_endpoint WHERE tenant = %s ORDER BY id", tenant),
        query(
            dsn,
            "SELECT s.* FROM outbox_webhook_secret s JOIN outbox_webhook_endpoint e"
            " ON e.id = s.endpoint_id WHERE e.tenant = %s ORDER BY s.id",
            tenant,
        ),
        query(dsn, "SELECT * FROM outbox_webhook_event WHERE tenant = %s ORDER BY id", tenant),
        query(
            dsn,
            "SELECT d.id, d.status, d.attempts FROM outbox_webhook_delivery d"
            " JOIN outbox_webhook_endpoint e ON e.id = d.endpoint_id WHERE e.tenant = %s"
            " ORDER BY d.id",
            tenant,
        ),
    ]


async def test_another_tenants_ids_are_refused_as_missing_and_its_rows_stay_as_they_were(
    wh: Webhooks,
) -> None:
    mine, theirs = acme(), AsyncTenantWebhooks("globex", guard=GUARD)
    other = await in_tx(wh, lambda c: theirs.create_endpoint(c, URL, ["*"]))
    test = await in_tx(wh, lambda c: theirs.send_test_event(c, other.endpoint.id))
    before = snapshot(wh_dsn(wh), "globex")
    n = other.endpoint.id
    attempts = [
        lambda c: mine.get_endpoint(c, n),
        lambda c: mine.update_endpoint(c, n, description="mine now"),
        lambda c: mine.disable_endpoint(c, n, "no"),
        lambda c: mine.enable_endpoint(c, n),
        lambda c: mine.rotate_secret(c, n),
        lambda c: mine.reveal_secret(c, n),
        lambda c: mine.delete_endpoint(c, n),
        lambda c: mine.deliveries(c, n),
        lambda c: mine.health(c, n),
        lambda c: mine.send_test_event(c, n),
    ]
    for attempt in attempts:
        with pytest.raises(WebhookRefused, match=f"^there is no webhook endpoint {n}$"):
            await in_tx(wh, attempt)
    with pytest.raises(WebhookRefused, match=f"^there is no webhook event {test.event_id}$"):
        await in_tx(wh, lambda c: mine.replay(c, test.event_id))
    assert await in_tx(wh, mine.list_endpoints) == []
    assert snapshot(wh_dsn(wh), "globex") == before


async def test_a_test_event_and_a_replay_reach_the_receiver_signed_with_the_revealed_secret(
    wh: Webhooks,
) -> None:
    hooks = acme()
    with HttpReceiver() as receiver:
        made = await in_tx(wh, lambda c: hooks.create_endpoint(c, receiver.url(), ["order.*"]))
        other = await in_tx(wh, lambda c: hooks.create_endpoint(c, receiver.url("/b"), ["*"]))
        test = await in_tx(wh, lambda c: hooks.send_test_event(c, made.endpoint.id))
        async with HttpxWebhookSender(GUARD) as sender:
            await workers(wh, sender).run(drain=True)
            (delivered,) = await in_tx(wh, lambda c: hooks.deliveries(c, made.endpoint.id))
            assert (delivered.status, delivered.attempts, delivered.last_status) == (
                Status.DISPATCHED, 1, 200,
            )  # fmt: skip
            health = await in_tx(wh, lambda c: hooks.health(c, made.endpoint.id))
            assert (health.enabled, health.failure_streak) == (True, 0)
            assert health.last_success_at is not None
            replayed = await in_tx(
                wh, lambda c: hooks.replay(c, test.event_id, endpoint_id=made.endpoint.id)
            )
            await workers(wh, sender).run(drain=True)
        secret = await in_tx(wh, lambda c: hooks.reveal_secret(c, made.endpoint.id))
        requests = receiver.snapshot()
    key = base64.b64encode(WebhookSecret.parse(secret).key).decode()
    bodies = [standardwebhooks.Webhook(key).verify(r.body, r.headers) for r in requests]
    assert [(b["type"], b["data"]) for b in bodies] == [
        ("webhook.test", {"test": True, "endpoint_id": made.endpoint.id})
    ] * 2
    assert [r.headers["webhook-id"] for r in requests] == [test.msg_id, replayed.msg_id]
    assert [r.path for r in requests] == ["/hook", "/hook"]  # the other endpoint got nothing
    assert other.endpoint.id != made.endpoint.id


async def test_a_delivery_without_a_readable_attempt_log_lists_no_attempts(wh: Webhooks) -> None:
    hooks = acme()
    made = await in_tx(wh, lambda c: hooks.create_endpoint(c, URL, ["invoice.paid"]))
    endpoint_id = made.endpoint.id
    await in_tx(wh, lambda c: hooks.send_test_event(c, endpoint_id))
    [delivery] = await in_tx(wh, lambda c: hooks.deliveries(c, endpoint_id))
    assert delivery.attempts_log == ()  # written before any attempt (or before the log existed)
    entry = {"at": "2026-03-01T12:00:00+00:00", "status": 503, "error": "HTTP 503",
             "response": "busy"}  # fmt: skip
    for stored, expected in [
        ('"junk"', ()),
        ('[1, {"at": "2026-03-01T12:00:00+00:00"}]', ()),  # not a list of objects: none
        (
            json.dumps([{"at": "not a time"}, entry]),  # an entry without a time is left out
            (AttemptView(datetime(2026, 3, 1, 12, tzinfo=UTC), 503, "HTTP 503", "busy"),),
        ),
    ]:
        await wh.rows(
            "UPDATE outbox_webhook_delivery SET payload = payload || jsonb_build_object("
            "'attempt_log', %s::jsonb) RETURNING id",
            stored,
        )
        [delivery] = await in_tx(wh, lambda c: hooks.deliveries(c, endpoint_id))
        assert delivery.attempts_log == expected
