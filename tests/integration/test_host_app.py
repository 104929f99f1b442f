"""A host's application object (examples/host_app) run two ways, with the same rows sent: by
``outbox --app ... worker --lane host-mail`` and by the host's own process (``Outbox.running``).
Its own lane and its suppression hook apply in both, on real PostgreSQL and a real SMTP server."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import psycopg
import pytest
from tests.support.postgres import query

from examples.host_app.outbox import HOST_LANE, make_outbox
from outbox_adapters.lanes.email import email_message
from outbox_adapters.postgres import enqueue
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
