"""``outbox top`` on a database of its own: each lane's figures as the rows and the leader say;
with ``--broker``, each consumer channel's lag as a real NATS JetStream counts it."""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Iterator
from datetime import timedelta

import psycopg
import pytest
from tests.support.broker_contract import Reader, message
from tests.support.cli import outbox
from tests.support.postgres import scratch_database

from examples.signup_service.serve import free_port
from outbox_adapters.brokers import connect_broker
from outbox_adapters.lanes.email_channel import EMAIL_CHANNEL_GROUP
from outbox_adapters.lanes.inapp import INAPP_CHANNEL_GROUP
from outbox_adapters.postgres import schema
from outbox_core.brokers import StreamSpec
from outbox_core.outcomes import OutcomeKind

pytestmark = pytest.mark.integration


@pytest.fixture
def db(postgres_server: str) -> Iterator[str]:
    with scratch_database(postgres_server, "top") as dsn:
        schema.apply(dsn)
        yield dsn


INSERT = """
INSERT INTO outbox_message (lane, payload, status, created_at, next_attempt_at, claim_token,
                            resolved_at, last_error, updated_at)
VALUES (%s, '{}', %s, now() - make_interval(secs => %s), now() + make_interval(secs => %s), %s,
        CASE WHEN %s THEN now() END, %s, now() - make_interval(secs => %s))
"""


def _fill(dsn: str) -> None:
    rows = [
        # status, created s ago, lease s from now, token, resolved, error, updated s ago
        ("pending", 90, 60, "t1", False, None, 0),  # in flight
        ("pending", 30, -5, "t2", False, None, 0),  # lease expired
        ("pending", 10, -1, None, False, "SMTP failure at connect: timed out", 1),  # retrying
        ("failed", 500, 0, "t3", True, "recipient bob@x.example refused: SMTP 550", 50),
        ("failed", 400, 0, "t4", True, "recipient ann@y.example refused: SMTP 550", 40),
    ]
    with psycopg.connect(dsn, autocommit=True) as conn:
        for status, created, lease, token, resolved, error, updated in rows:
            conn.execute(
                INSERT, ("email-a", status, created, lease, token, resolved, error, updated)
            )
        for ago in (2, 4, 6, 8):  # sent within the minute, 2 s after they were written
            conn.execute(
                "INSERT INTO outbox_message (lane, payload, status, created_at, resolved_at,"
                " claim_token) VALUES ('email-a', '{}', 'dispatched',"
                " now() - make_interval(secs => %s + 2), now() - make_interval(secs => %s), 't')",
                (ago, ago),
            )
        conn.execute(
            "INSERT INTO outbox_leader (lane, holder, term, elected_at, expires_at)"
            " VALUES ('email-a', 'host-1:42', 4, now(), now() + interval '30 seconds'),"
            " ('gone', 'host-2:1', 9, now(), now() - interval '1 second')"
        )
        conn.execute(
            "INSERT INTO outbox_heartbeat (lane, holder, host, pid, started_at, beat_at,"
            " stale_after, leads) VALUES ('email-a', 'host-1:42', 'host-1', 42, now(), now(),"
            " interval '1 minute', true), ('email-a', 'host-2:7', 'host-2', 7, now(),"
            " now() - interval '2 minutes', interval '1 minute', false)"
        )
        conn.execute(
            "INSERT INTO outbox_event (lane, payload) VALUES ('events', %s)",
            (json.dumps({"topic": "t", "subject": "k", "id": "e1", "type": "x", "source": "s"}),),
        )


def test_top_once_json_shows_each_lanes_figures(db: str) -> None:
    _fill(db)
    result = outbox("top", "--database-url", db, "--json")
    assert result.exit_code == 0, result.output
    lanes = {(lane["queue"], lane["lane"]): lane for lane in json.loads(result.stdout)["lanes"]}
    assert set(lanes) == {("outbox_message", "email-a"), ("outbox_event", "events")}
    email = lanes["outbox_message", "email-a"]
    assert {k: email[k] for k in ("pending", "in_flight", "leases_expired", "failed")} == {
        "pending": 3,
        "in_flight": 1,
        "leases_expired": 1,
        "failed": 2,
    }
    assert 89 <= email["oldest_pending_s"] < 120
    assert email["sent_per_min"] == 4
    assert email["p50_s"] == pytest.approx(2.0, abs=0.01)
    assert email["p95_s"] == pytest.approx(2.0, abs=0.01)
    # The most recent error's class; the two refusals are one class whatever their address.
    assert (email["last_error_class"], email["last_error_count"]) == ("SMTP failure at connect", 1)
    assert (email["leader"], email["term"]) == ("host-1:42", 4)
    assert email["workers"] == 1  # host-2's beat is older than its own bound
    events = lanes["outbox_event", "events"]
    assert (events["pending"], events["leader"], events["sent_per_min"]) == (1, None, 0)
    assert events["workers"] == 0

    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "UPDATE outbox_message SET updated_at = now() - interval '1 hour'"
            " WHERE last_error LIKE 'SMTP failure%'"
        )
    again = json.loads(outbox("top", "--database-url", db, "--json").stdout)["lanes"]
    email = next(lane for lane in again if lane["lane"] == "email-a")
    assert (email["last_error_class"], email["last_error_count"]) == (
        "recipient <address> refused",
        2,
    )


def test_top_once_draws_the_table(db: str) -> None:
    _fill(db)
    result = outbox("top", "--database-url", db, "--once")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "email-a" in out
    assert "outbox_event/events" in out
    assert "host-1:42 (4)" in out
    assert "SMTP failure at connect (x1)" in out
    assert "bob@x.example" not in out


async def _half_consumed(nats_url: str, topic: str) -> None:
    """Five events on ``topic``; the e-mail channel's group takes all five and acknowledges two
    (the other three stay handed out until JetStream's ack wait, minutes away)."""
    broker = await connect_broker(nats_url, streams=[StreamSpec(name=topic, subjects=(topic,))])
    try:
        publisher = broker.publisher()
        for n in range(5):
            sent = await publisher.publish(message(topic, "k", n), budget=timedelta(seconds=10))
            assert sent.kind is OutcomeKind.SENT, sent
        async with Reader(broker.consumer(EMAIL_CHANNEL_GROUP, [topic])) as reader:
            got = await reader.take(5)
            for m in got[:2]:
                await m.ack()
    finally:
        await broker.aclose()


def test_top_shows_each_consumer_channels_lag_and_parked_events(db: str, nats_url: str) -> None:
    topic = f"top-{secrets.token_hex(4)}"
    asyncio.run(_half_consumed(nats_url, topic))
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO outbox_channel_parked (channel, event_id, kind, reason, attempts)"
            " VALUES (%s, 'e1', 'tenant_welcome', 'no admin address', 5)",
            (EMAIL_CHANNEL_GROUP,),
        )
    args = ("top", "--database-url", db, "--broker", nats_url, "--topic", topic)
    result = outbox(*args, "--json")
    assert result.exit_code == 0, result.output
    channels = {c["group"]: c for c in json.loads(result.stdout)["channels"]}
    assert channels[EMAIL_CHANNEL_GROUP] == {
        "group": EMAIL_CHANNEL_GROUP,
        "subject": topic,
        "waiting": 0,
        "unacknowledged": 3,
        "parked": 1,
    }
    # The in-app channel never joined this topic: the broker does not know it there.
    assert channels[INAPP_CHANNEL_GROUP]["waiting"] is None

    drawn = outbox(*args, "--once")
    assert drawn.exit_code == 0, drawn.output
    assert "consumer channels" in drawn.stdout
    assert "not joined" in drawn.stdout

    down = outbox(
        "top", "--database-url", db, "--broker", f"nats://127.0.0.1:{free_port()}", "--once"
    )
    assert down.exit_code != 0
    assert "cannot read the consumer channels (--broker)" in down.output
