"""A broker that cannot be reached is never a silent success: ``outbox relay --drain`` exits 1
when it could not publish what was due, and ``outbox top --once --broker`` still shows the
database's lanes, then exits 1 naming ``--broker``."""

from __future__ import annotations

import json
import secrets

import pytest
from tests.support.cli import outbox
from tests.support.postgres import query

pytestmark = pytest.mark.integration

#: Nothing listens on port 1.
DOWN = "nats://127.0.0.1:1"


def test_a_drain_that_could_not_publish_what_was_due_exits_1(dsn: str) -> None:
    topic = f"down-{secrets.token_hex(3)}"
    made = outbox(
        "publish", "--database-url", dsn, "--topic", topic, "--key", "k", "--type", "t",
        "--data", "{}", "--json",
    )  # fmt: skip
    assert made.exit_code == 0, made.output
    event_id = json.loads(made.stdout)["event_id"]

    relayed = outbox(
        "relay", "--database-url", dsn, "--broker", DOWN, "--topic", topic, "--drain",
        "--no-leader", "--poll-interval", "0.05",
    )  # fmt: skip
    assert relayed.exit_code == 1, relayed.output
    assert "retried 1" in relayed.stdout
    assert "--drain: 1 due row(s) could not be finished" in relayed.stderr
    assert query(dsn, "SELECT status FROM outbox_event WHERE event_id = %s", event_id) == [
        ("pending",)
    ]


def test_top_once_shows_the_lanes_and_reports_the_broker_unreachable(dsn: str) -> None:
    shown = outbox("top", "--once", "--database-url", dsn, "--broker", DOWN)
    assert shown.exit_code == 1, shown.output
    assert "outbox top" in shown.stdout  # the lanes' table, from the database
    assert "broker unreachable" in shown.stdout
    assert shown.stderr.startswith("Error: cannot read the consumer channels (--broker)")

    as_json = outbox("top", "--once", "--json", "--database-url", dsn, "--broker", DOWN)
    assert as_json.exit_code == 1, as_json.output
    found = json.loads(as_json.stdout)
    assert isinstance(found["lanes"], list)
    assert found["lanes"]
    assert found["channels"] == []
    assert "NATS" in found["broker_error"]
