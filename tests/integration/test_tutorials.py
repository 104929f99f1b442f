"""The tutorials' code (docs/tutorials/code, included into docs/tutorials/*.md) run against a real
PostgreSQL and SMTP server, each asserting what its page promises. The FastAPI page shows
examples/fastapi_app (tests/integration/test_fastapi.py runs it) and the Alembic page the files
tests/integration/test_alembic.py migrates with; tests/unit/test_docs.py checks every included
file is one of these."""

from __future__ import annotations

import os
import subprocess
import sys
from email import message_from_bytes
from email.message import EmailMessage
from email.policy import default as default_policy
from pathlib import Path

import pytest
from docs.tutorials.code import asyncio_email
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import async_sessionmaker
from tests.support.postgres import query, scratch_database

from outbox_adapters.demo.sink import SmtpSink
from outbox_adapters.smtp import SmtpSettings

pytestmark = pytest.mark.integration

CODE = Path(__file__).resolve().parents[2] / "docs" / "tutorials" / "code"


def _text(data: bytes) -> str:
    mail = message_from_bytes(data, policy=default_policy)
    assert isinstance(mail, EmailMessage)
    body = mail.get_body(("plain",))
    assert body is not None
    return str(body.get_content())


async def test_asyncio_tutorial_sends_the_welcome_once_and_scrubs_its_link(
    postgres_server: str, sink: SmtpSink, capsys: pytest.CaptureFixture[str]
) -> None:
    smtp = SmtpSettings.from_url(
        f"smtp://{sink.host}:{sink.port}", sender="noreply@example.org", ca_file=str(sink.ca_file)
    )
    with scratch_database(postgres_server, "tutorial_asyncio") as dsn:
        await asyncio_email.main(dsn, smtp, "ann@example.org")
        assert capsys.readouterr().out == "account 1: 1 e-mail(s) sent\n"
        [mail] = sink.received
        assert mail.recipients == ("ann@example.org",)
        assert "https://app.example.org/reset/ann@example.org" in _text(mail.data)
        # Sent, recorded, and the secret link gone from the stored row.
        assert query(dsn, "SELECT status, payload ? 'password_reset_url' FROM outbox_message") == [
            ("dispatched", False)
        ]

        # The same address again: the account's INSERT fails, so its e-mail is not written.
        engine = await asyncio_email.set_up(dsn)
        try:
            with pytest.raises(IntegrityError):
                await asyncio_email.sign_up(async_sessionmaker(engine), "ann@example.org")
        finally:
            await engine.dispose()
        assert query(dsn, "SELECT count(*) FROM tutorial_account") == [(1,)]
        assert query(dsn, "SELECT count(*) FROM outbox_message") == [(1,)]


def test_django_tutorial_commits_the_order_with_its_mail_and_manage_py_sends_it(
    postgres_server: str, sink: SmtpSink, lane: str
) -> None:
    with scratch_database(postgres_server, "tutorial_django") as dsn:
        env = {
            **os.environ,
            "DATABASE_URL": dsn,
            "DJANGO_SETTINGS_MODULE": "django_shop.settings",
            "PYTHONPATH": os.pathsep.join([str(CODE), *sys.path]),
        }

        def run(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(  # noqa: S603 - our own interpreter and the tutorial's files
                [sys.executable, *args],
                cwd=CODE, env=env, capture_output=True, text=True, timeout=120, check=False,
            )  # fmt: skip

        def ok(*args: str) -> str:
            done = run(*args)
            assert done.returncode == 0, done.stderr
            return done.stdout

        ok("manage.py", "outbox", "schema", "apply")
        ok("manage.py", "migrate", "--run-syncdb")
        place = "from django_shop.orders import place_order; print(place_order({!r}, lane={!r}))"
        order = int(
            ok("manage.py", "shell", "-c", place.format("ann@example.org", lane)).split()[-1]
        )
        refused = run("manage.py", "shell", "-c", place.format("not an address", lane))
        assert refused.returncode != 0
        assert "InvalidRecipient" in refused.stderr
        # The refused order rolled back with its block: one order, one e-mail.
        assert query(dsn, "SELECT id, customer FROM django_shop_order") == [
            (order, "ann@example.org")
        ]
        ok(
            "manage.py", "outbox", "worker", "--lane", lane, "--drain", "--no-leader",
            "--smtp-url", f"smtp://{sink.host}:{sink.port}", "--smtp-ca-file", str(sink.ca_file),
            "--sender", "shop@example.org",
        )  # fmt: skip
        [mail] = sink.received
        assert mail.recipients == ("ann@example.org",)
        assert f"Order {order} is in" in _text(mail.data)
        assert query(dsn, "SELECT status FROM outbox_message WHERE lane = %s", lane) == [
            ("dispatched",)
        ]
