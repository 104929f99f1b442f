"""`outbox dlq redrive` sends what the e-mail channel parked (docs/operations.md, ADR 0021), from the
command line on real servers: an event relayed to NATS JetStream, its welcome e-mail refused five
times by the SMTP sink (451 each time), so its row fails and the event is parked. The operator fixes
the cause and runs `dlq redrive --database-url ...`: the park is lifted, the failed row goes back to
pending (audited: who, when, why), and exactly one e-mail goes out. A second redrive sends none."""

from __future__ import annotations

import json
import secrets
from typing import Any

import pytest
from tests.support.cli import outbox
from tests.support.postgres import query

from outbox_adapters.demo.sink import SinkHandler, SmtpSink

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("empty_outbox")]

ADMIN = "ann@example.org"


def _publish(dsn: str, topic: str, broker: str) -> str:
    data = {"tenant_id": "t-1", "tenant_name": "Acme", "admin_email": ADMIN}
    made = outbox(
        "publish", "--database-url", dsn, "--topic", topic, "--key", "t-1",
        "--type", "tenant.provisioned", "--source", "auth", "--data", json.dumps(data), "--json",
    )  # fmt: skip
    assert made.exit_code == 0, made.output
    relayed = outbox(
        "relay", "--database-url", dsn, "--broker", broker, "--topic", topic, "--drain",
        "--no-leader", "--poll-interval", "0.05",
    )  # fmt: skip
    assert relayed.exit_code == 0, relayed.output
    event_id: str = json.loads(made.stdout)["event_id"]
    return event_id


def _consume(dsn: str, topic: str, sink: SmtpSink, broker: str) -> None:
    ran = outbox(
        "consume", "--channel", "email", "--database-url", dsn, "--broker", broker,
        "--topic", topic, "--smtp-url", f"smtp://{sink.host}:{sink.port}",
        "--smtp-ca-file", str(sink.ca_file), "--sender", "noreply@example.org",
        "--public-url", "https://app.example.org", "--drain",
    )  # fmt: skip
    assert ran.exit_code == 0, ran.output


def _to_admin(sink: SmtpSink) -> int:
    return sum(ADMIN in mail.recipients for mail in sink.received)


def test_a_redrive_sends_the_parked_e_mail_once(
    dsn: str, nats_url: str, sink: SmtpSink, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = f"redrive-{secrets.token_hex(3)}"
    event_id = _publish(dsn, topic, nats_url)

    async def refused(*_args: Any) -> str:
        return "451 4.3.0 Mailbox temporarily unavailable, try again later"

    with monkeypatch.context() as broken:
        broken.setattr(sink.handler, "handle_RCPT", refused)
        _consume(dsn, topic, sink, nats_url)  # 5 attempts (about 30 s), then parked
    assert _to_admin(sink) == 0
    assert query(dsn, "SELECT status, attempts FROM outbox_message") == [("failed", 5)]
    listed = outbox("dlq", "list", "--broker", nats_url, "--topic", topic, "--json")
    (letter,) = json.loads(listed.stdout)["dead_letters"]
    assert (letter["message_id"], letter["kind"]) == (event_id, "tenant_welcome")

    # The sink is fixed (the real handler again). Without a redrive, nothing is sent.
    assert sink.handler.handle_RCPT.__func__ is SinkHandler.handle_RCPT  # type: ignore[attr-defined]
    _consume(dsn, topic, sink, nats_url)
    assert _to_admin(sink) == 0

    redriven = outbox(
        "dlq", "redrive", "--broker", nats_url, "--topic", topic, "--database-url", dsn,
        "--actor", "ops@example", "--reason", "T-42 sink fixed",
    )  # fmt: skip
    assert redriven.exit_code == 0, redriven.output
    assert "1 event(s) put back" in redriven.stdout
    assert "1 park(s) lifted" in redriven.stdout
    _consume(dsn, topic, sink, nats_url)
    assert _to_admin(sink) == 1
    assert query(dsn, "SELECT status FROM outbox_message") == [("dispatched",)]
    assert query(dsn, "SELECT actor, previous_attempts, reason FROM outbox_requeue_audit") == [
        ("ops@example", 5, "dlq redrive: T-42 sink fixed")
    ]
    assert query(dsn, "SELECT count(*) FROM outbox_channel_parked") == [(0,)]

    again = outbox(
        "dlq", "redrive", "--broker", nats_url, "--topic", topic, "--database-url", dsn
    )  # fmt: skip
    assert again.exit_code == 0, again.output
    assert "0 event(s) put back" in again.stdout
    _consume(dsn, topic, sink, nats_url)
    assert _to_admin(sink) == 1  # exactly one e-mail for (event, kind)


def test_a_redrive_without_the_database_says_what_it_left_alone(
    dsn: str, nats_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OUTBOX_DATABASE_URL", raising=False)
    topic = f"redrive-{secrets.token_hex(3)}"
    _publish(dsn, topic, nats_url)  # declares the topic's stream
    done = outbox("dlq", "redrive", "--broker", nats_url, "--topic", topic)
    assert done.exit_code == 0, done.output
    assert "no --database-url" in done.stderr
