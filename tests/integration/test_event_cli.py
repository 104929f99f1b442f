"""The event commands end to end on real servers: `outbox publish` → `outbox relay --drain` (NATS
JetStream) → `outbox consume --channel email --drain` (the real SMTP sink) and `--channel inapp`;
`outbox dlq list|redrive`; a relay with no broker says so and leaves the events alone."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time

import pytest
from tests.support.cli import outbox
from tests.support.postgres import query

from outbox_adapters.demo.sink import SmtpSink

pytestmark = [
    pytest.mark.integration,
    pytest.mark.usefixtures("empty_outbox", "kafka_leftovers"),
]


def signup_event(dsn: str, topic: str, tenant: str, admin: str) -> str:
    data = {
        "tenant_id": tenant,
        "tenant_name": "Acme",
        "tenant_slug": "acme",
        "admin_email": admin,
        "admin_display_name": "Ann",
    }
    made = outbox(
        "publish", "--database-url", dsn, "--topic", topic, "--key", tenant,
        "--type", "tenant.provisioned", "--source", "auth", "--data", json.dumps(data), "--json",
    )  # fmt: skip
    assert made.exit_code == 0, made.output
    event_id: str = json.loads(made.stdout)["event_id"]
    return event_id


@pytest.mark.parametrize("broker", ["nats", "kafka"])
def test_publish_relay_and_both_channels_from_the_command_line(
    dsn, broker, request, sink: SmtpSink
):
    """The whole flow on each broker: NATS JetStream, and Kafka's wire protocol (the mock cluster,
    or the broker OUTBOX_TEST_KAFKA names)."""
    broker_url = request.getfixturevalue(f"{broker}_url")
    # A topic of its own per run: the session's broker may be the machine's shared one.
    topic = f"events-{secrets.token_hex(3)}"
    first = signup_event(dsn, topic, "tenant-1", "ann@example.org")
    second = signup_event(dsn, topic, "tenant-2", "bob@example.org")

    relayed = outbox(
        "relay", "--database-url", dsn, "--broker", broker_url, "--topic", topic, "--drain",
        "--no-leader", "--poll-interval", "0.05",
    )  # fmt: skip
    assert relayed.exit_code == 0, relayed.output
    assert query(dsn, "SELECT count(*) FROM outbox_event WHERE published_at IS NOT NULL") == [(2,)]

    emails = outbox(
        "consume", "--channel", "email", "--database-url", dsn, "--broker", broker_url,
        "--topic", topic, "--smtp-url", f"smtp://{sink.host}:{sink.port}",
        "--smtp-ca-file", str(sink.ca_file), "--sender", "noreply@example.org",
        "--public-url", "https://app.example.org", "--platform-owner", "owner@example.org",
        "--drain",
    )  # fmt: skip
    assert emails.exit_code == 0, emails.output
    to = sorted(r for mail in sink.received for r in mail.recipients)
    assert to == ["ann@example.org", "bob@example.org", "owner@example.org", "owner@example.org"]
    assert all(mail.tls for mail in sink.received)

    feed = outbox(
        "consume", "--channel", "inapp", "--database-url", dsn, "--broker", broker_url,
        "--topic", topic, "--drain",
    )  # fmt: skip
    assert feed.exit_code == 0, feed.output
    rows = query(dsn, "SELECT event_id, audience FROM outbox_notification ORDER BY 1, 2")
    assert rows == sorted(
        [(first, "platform"), (first, "tenant"), (second, "platform"), (second, "tenant")]
    )

    letters = outbox("dlq", "list", "--broker", broker_url, "--topic", topic, "--json")
    assert letters.exit_code == 0, letters.output
    assert json.loads(letters.stdout) == {"dead_letters": []}


def test_a_relay_without_a_broker_says_so_and_leaves_the_events_alone(dsn, monkeypatch):
    monkeypatch.delenv("OUTBOX_BROKER", raising=False)
    signup_event(dsn, "platform-events", "tenant-9", "eve@example.org")
    relayed = outbox("relay", "--database-url", dsn, "--drain")
    assert relayed.exit_code == 0
    assert "relay" in relayed.stderr
    assert "broker" in relayed.stderr
    assert query(dsn, "SELECT status FROM outbox_event") == [("pending",)]


def test_publish_refuses_bad_input_in_one_line_and_writes_nothing(dsn):
    bad = outbox(
        "publish", "--database-url", dsn, "--key", "t", "--type", "no spaces allowed",
        "--data", "{}",
    )  # fmt: skip
    assert bad.exit_code == 2
    assert "event type" in bad.stderr
    not_json = outbox(
        "publish", "--database-url", dsn, "--key", "t", "--type", "a.b", "--data", "{"
    )
    assert not_json.exit_code == 2
    assert "--data" in not_json.stderr
    assert query(dsn, "SELECT count(*) FROM outbox_event") == [(0,)]


def test_a_listening_relay_publishes_a_new_event_at_once_not_at_its_next_poll(dsn, nats_url):
    """With a 60 s poll, only the NOTIFY of the publish's commit can explain a relay within
    seconds (the e-mail channel's lane is woken the same way, by the same listener)."""
    topic = f"events-{secrets.token_hex(3)}"
    first = signup_event(dsn, topic, "tenant-w1", "ann@example.org")
    relay = subprocess.Popen(  # noqa: S603 - our own command line
        [
            sys.executable, "-m", "outbox_adapters", "relay", "--database-url", dsn,
            "--broker", nats_url, "--topic", topic, "--no-leader", "--poll-interval", "60",
        ],
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip

    def published(event_id: str) -> bool:
        found = query(dsn, "SELECT published_at FROM outbox_event WHERE event_id = %s", event_id)
        return found != [(None,)]

    try:
        # The first event proves the relay has claimed once: it now sleeps on its 60 s poll.
        deadline = time.monotonic() + 20
        while not published(first) and time.monotonic() < deadline and relay.poll() is None:
            time.sleep(0.05)
        if not published(first):
            relay.kill()
            pytest.fail(f"the relay published nothing: {relay.communicate(timeout=20)}")
        second = signup_event(dsn, topic, "tenant-w2", "bob@example.org")
        committed = time.monotonic()
        while not published(second) and time.monotonic() < committed + 5:
            time.sleep(0.02)
        waited = time.monotonic() - committed
        assert published(second), "the event waited for the poll: no wake-up on commit"
        relay.send_signal(signal.SIGTERM)
        stdout, stderr = relay.communicate(timeout=20)
    finally:
        with contextlib.suppress(ProcessLookupError):
            relay.kill()
    assert relay.returncode == 0, stderr
    assert "wake-up: LISTEN outbox_wakeup (polling every 60s stays the fallback)" in stdout
    assert waited < 5
