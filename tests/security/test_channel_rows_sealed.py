"""The e-mail channel's rows are sealed like every other producer's (ADR 0010, docs/reliability.md
security promise 1): an application with encryption keys runs its e-mail channel from its
application object (``Outbox.running``) on real NATS JetStream and PostgreSQL; the events' welcome
e-mails carry a canary in ``setup_url`` (a default secret key), and the e-mail lane's mailer refuses
every send for now, so the rows stay pending: the moment a secret is most exposed. A full
``pg_dump`` then holds the canary in none of them (``channel_canaries_in_dump=0``), while the rows,
opened with the keys, hold it. The same application without keys leaves it in the dump: the
check sees what it is looking for.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from tests.security.test_secrets_at_rest import dump_lines_with
from tests.support.channels import tenant_event, until

from outbox_adapters.app import EmailChannelLane, EmailLane, Outbox
from outbox_adapters.brokers import broker_from_url
from outbox_adapters.crypto import AesGcmEncryptor
from outbox_adapters.lanes.channel_workers import ChannelTiming
from outbox_adapters.lanes.email_channel import EmailDraft, EmailRecipes
from outbox_adapters.memory import RecordingMailer
from outbox_core.brokers import StreamSpec
from outbox_core.events import EventEnvelope
from outbox_core.outcomes import Outcome
from outbox_core.ports import BrokerMessage, Mailer
from outbox_core.sealing import open_sealed

pytestmark = pytest.mark.integration

KEYS = AesGcmEncryptor({"k1": b"\x5a" * 32}, active="k1")
EVENTS = 3


def _recipes(canary: str) -> EmailRecipes:
    def welcome(event: EventEnvelope) -> EmailDraft:
        return EmailDraft(
            to=str(event.data["admin_email"]),
            subject="Confirm your account",
            text="Set your password: $setup_url\n",
            fields={"setup_url": f"https://app.example/setup/{event.id}/{canary}"},
        )

    return {"tenant.provisioned": [("welcome", welcome)]}


def _refusing_mailers() -> Callable[..., contextlib.AbstractAsyncContextManager[Mailer]]:
    @contextlib.asynccontextmanager
    async def factory(*_args: Any) -> AsyncIterator[Mailer]:
        yield RecordingMailer(default=Outcome.transient("451 try again later"))

    return factory


async def _run_channel(dsn: str, nats_url: str, canary: str, *, keys: bool) -> tuple[str, str]:
    """Run the app's e-mail channel until every event's row is written; its lane and topic."""
    tag = secrets.token_hex(4)
    topic, lane = f"sealed-{tag}", f"sealed-mail-{tag}"
    app = Outbox(
        database_url=dsn,
        sender="noreply@shop.example",
        broker=nats_url,
        encryptor=KEYS if keys else None,
        streams=[StreamSpec(name=f"sealed_{tag}", subjects=(topic,))],
        poll_interval=0.05,
        lanes=[
            EmailChannelLane(
                recipes=_recipes(canary),
                topic=topic,
                group=f"sealed-{tag}",
                mail=EmailLane(lane, mailer=_refusing_mailers()),
                timing=ChannelTiming(retry_delay=timedelta(milliseconds=100)),
            )
        ],
    )
    broker = broker_from_url(nats_url)
    try:
        await broker.declare(StreamSpec(name=f"sealed_{tag}", subjects=(topic,)))
        for _ in range(EVENTS):
            event = tenant_event()
            message = BrokerMessage(
                subject=topic, key=event.key, message_id=event.id, body=event.encode(), headers={}
            )
            outcome = await broker.publisher().publish(message, budget=timedelta(seconds=5))
            assert outcome.kind.value == "sent", outcome
    finally:
        await broker.aclose()

    async def written() -> bool:
        return len(await _rows(dsn, lane)) >= EVENTS

    async with app.running():
        await until(written, within=30)
    return lane, topic


async def _rows(dsn: str, lane: str) -> list[tuple[str, dict[str, Any]]]:
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        cursor = await conn.execute(
            "SELECT status, payload FROM outbox_message WHERE lane = %s", (lane,)
        )
        return list(await cursor.fetchall())


async def test_the_e_mail_channel_seals_its_rows_secret_fields(
    dsn: str, nats_url: str, report_figure: Callable[[str], None]
) -> None:
    canary = f"chcanary{secrets.token_hex(6)}"
    lane, _ = await _run_channel(dsn, nats_url, canary, keys=True)
    rows = await _rows(dsn, lane)
    assert len(rows) == EVENTS
    assert {status for status, _ in rows} <= {"pending", "failed"}  # unsent: still secret
    hits = dump_lines_with(dsn, canary)
    opened = [open_sealed(payload, lane=lane, encryptor=KEYS) for _, payload in rows]
    assert all(canary in str(p["setup_url"]) for p in opened)
    report_figure(
        f"P1 channel_rows_unsent={len(rows)} channel_canaries_in_dump={len(hits)}"
        " (the e-mail channel's rows, sealed with the application's keys)"
    )
    assert hits == []


async def test_without_keys_the_dump_check_finds_the_channel_s_canary(
    dsn: str, nats_url: str
) -> None:
    canary = f"chprobe{secrets.token_hex(6)}"
    await _run_channel(dsn, nats_url, canary, keys=False)
    hits = dump_lines_with(dsn, canary)
    assert len(hits) == EVENTS
    assert {table for table, _ in hits} == {"public.outbox_message"}
