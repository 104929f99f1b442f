"""A host's application object (examples/host_app) run two ways, with the same rows sent: by
``outbox --app ... worker --lane NAME`` and by the host's own process (``Outbox.running``). Its
own lane, its own recipe (an e-mail channel over NATS) and its suppression hook apply in both, on
real PostgreSQL, a real SMTP server and a real JetStream."""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
import sys

import psycopg
import pytest
from tests.support.postgres import query

from examples.host_app.outbox import HOST_LANE, ORDERS_LANE, make_outbox
from outbox_adapters.lanes.email import email_message
from outbox_adapters.postgres import enqueue
from outbox_adapters.postgres.events import publish
from outbox_adapters.smtp import SmtpSettings

pytestmark = pytest.mark.integration

SENDER = "noreply@host.example"
RECIPIENTS = ("ann@example.org", "unsubscribed@host.example", "bob@example.org")


def _enqueue(dsn: str, batch: str) -> None:
    with psycopg.connect(dsn) as conn, conn.transaction():
        for to in RECIPIENTS:
            enqueue(
                conn,
                email_message(to=to, subject=f"Hello {batch}", text="Hi", lane=HOST_LANE),
            )


def _outcomes(dsn: str, batch: str) -> list[tuple[str, str, str | None]]:
    rows = query(
        dsn,
        "SELECT payload->>'to', status, last_error FROM outbox_message"
        " WHERE lane = %s AND payload->>'subject' = %s ORDER BY id",
        HOST_LANE,
        f"Hello {batch}",
    )
    return [(to, status, (error or "")[:80] or None) for to, status, error in rows]


def _delivered(sink, batch: str) -> list[str]:
    subject = f"Subject: Hello {batch}".encode()
    return sorted(
        rcpt for mail in sink.received if subject in mail.data for rcpt in mail.recipients
    )


def test_the_same_application_object_sends_the_same_rows_from_the_cli_and_the_host(dsn, sink):
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM outbox_message WHERE lane = %s", (HOST_LANE,))
    _enqueue(dsn, "cli")
    env = {
        **os.environ,
        "HOST_DATABASE_URL": dsn,
        "HOST_SMTP_URL": f"smtp://{sink.host}:{sink.port}",
        "HOST_SMTP_CA_FILE": str(sink.ca_file),
        "HOST_SENDER": SENDER,
    }
    done = subprocess.run(  # noqa: S603 - our own CLI
        [sys.executable, "-m", "outbox_adapters", "--app",
         "examples.host_app.outbox:from_environment",
         "worker", "--lane", HOST_LANE, "--drain", "--no-listen", "--poll-interval", "0.1"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr

    _enqueue(dsn, "host")
    smtp = SmtpSettings.from_url(
        f"smtp://{sink.host}:{sink.port}", sender=SENDER, ca_file=str(sink.ca_file)
    )
    app = make_outbox(database_url=dsn, smtp=smtp)

    async def host_process() -> None:
        async with app.running(HOST_LANE):
            for _ in range(600):
                left = query(
                    dsn,
                    "SELECT count(*) FROM outbox_message WHERE lane = %s AND status = 'pending'",
                    HOST_LANE,
                )
                if left == [(0,)]:
                    return
                await asyncio.sleep(0.1)

    asyncio.run(host_process())

    by_cli, by_host = _outcomes(dsn, "cli"), _outcomes(dsn, "host")
    assert by_cli == by_host
    assert [status for _, status, _ in by_cli] == ["dispatched", "failed", "dispatched"]
    assert "suppressed" in (by_cli[1][2] or "")
    assert (
        _delivered(sink, "cli")
        == _delivered(sink, "host")
        == [
            "ann@example.org",
            "bob@example.org",
        ]
    )


def _ship(dsn: str, topic: str, batch: str) -> None:
    with psycopg.connect(dsn) as conn, conn.transaction():
        for n, to in enumerate(RECIPIENTS):
            publish(
                conn, topic=topic, key=f"order-{batch}-{n}", type="order.shipped",
                data={"email": to, "order": f"{batch}-{n}"},
            )  # fmt: skip


def _notices(dsn: str, batch: str) -> list[tuple[str, str]]:
    # The recipient's row of each event of the batch (keyed event_id:kind), in order.
    rows = query(
        dsn,
        "SELECT m.payload->>'to', m.status FROM outbox_event e JOIN outbox_message m"
        " ON m.lane = %s AND m.idempotency_key = e.event_id || ':customer'"
        " WHERE e.partition_key LIKE %s ORDER BY e.partition_key",
        ORDERS_LANE,
        f"order-{batch}-%",
    )
    return [(to, status) for to, status in rows]


@pytest.mark.usefixtures("empty_outbox")
def test_the_application_s_own_recipe_runs_the_same_from_the_cli_and_the_host(dsn, sink, nats_url):
    # The relay and the e-mail channel of the app (its recipe, its suppression hook), run by
    # `outbox --app ... worker --lane events|host-orders` and then by the host's own process.
    topic = f"host.orders.{secrets.token_hex(3)}"
    _ship(dsn, topic, "cli")
    env = {
        **os.environ,
        "HOST_DATABASE_URL": dsn,
        "HOST_SMTP_URL": f"smtp://{sink.host}:{sink.port}",
        "HOST_SMTP_CA_FILE": str(sink.ca_file),
        "HOST_SENDER": SENDER,
        "HOST_BROKER_URL": nats_url,
        "HOST_TOPIC": topic,
    }
    for lane in ("events", ORDERS_LANE):
        done = subprocess.run(  # noqa: S603 - our own CLI
            [sys.executable, "-m", "outbox_adapters", "--app",
             "examples.host_app.outbox:from_environment",
             "worker", "--lane", lane, "--drain", "--poll-interval", "0.1"],
            env=env, capture_output=True, text=True, timeout=180, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"lane {lane}: holder" in done.stdout

    _ship(dsn, topic, "host")
    smtp = SmtpSettings.from_url(
        f"smtp://{sink.host}:{sink.port}", sender=SENDER, ca_file=str(sink.ca_file)
    )
    app = make_outbox(database_url=dsn, smtp=smtp, broker=nats_url, topic=topic)

    async def host_process() -> None:
        async with app.running("events", ORDERS_LANE):
            for _ in range(900):
                settled = [status for _, status in _notices(dsn, "host")]
                if len(settled) == len(RECIPIENTS) and "pending" not in settled:
                    return
                await asyncio.sleep(0.1)
        raise AssertionError(f"the host's process did not send: {_notices(dsn, 'host')}")

    asyncio.run(host_process())

    by_cli, by_host = _notices(dsn, "cli"), _notices(dsn, "host")
    assert [status for _, status in by_cli] == [status for _, status in by_host]
    assert [status for _, status in by_cli] == ["dispatched", "failed", "dispatched"]
    shipped = sorted(
        rcpt for mail in sink.received if b"shipped" in mail.data for rcpt in mail.recipients
    )
    # Each customer once per run; the unsubscribed one never (the app's own hook).
    assert shipped == ["ann@example.org", "ann@example.org", "bob@example.org", "bob@example.org"]
