"""The e-mail Message-ID (lanes.email.row_message_id): opaque, the same on every attempt at a row,
and different for rows of the same id in two databases."""

from __future__ import annotations

import re
import secrets
from datetime import UTC, datetime, timedelta

import attrs

from outbox_adapters.clock import FakeClock
from outbox_adapters.lanes.email import EmailHandler, email_message, row_message_id
from outbox_adapters.memory import MemoryStore, RecordingMailer
from outbox_core.messages import ClaimedRow, ClaimToken
from outbox_core.outcomes import Outcome, OutcomeKind
from outbox_core.ports import ClaimRequest

NOW = datetime(2030, 1, 1, 9, 0, 0, 123456, tzinfo=UTC)
OPAQUE = re.compile(r"<[a-z2-7]{32}@example\.org>")


def claimed(row_id: int = 123457, *, attempts: int = 1, created_at: datetime = NOW) -> ClaimedRow:
    message = email_message(to="ada@example.org", subject="Hi", text="Hello")
    return ClaimedRow(
        id=row_id,
        lane="email",
        payload=dict(message.payload),
        attempts=attempts,
        token=ClaimToken.from_entropy(secrets.token_bytes(16)),
        lease_expires_at=NOW + timedelta(minutes=attempts),
        created_at=created_at,
    )


def handler(mailer: RecordingMailer, scope: str = "") -> EmailHandler:
    return EmailHandler(
        mailer, sender="outbox@example.org", clock=FakeClock(NOW), message_id_scope=scope
    )


def test_the_message_id_is_opaque_it_shows_neither_the_row_id_nor_the_lane() -> None:
    found = handler(RecordingMailer()).message_id(claimed(123457))
    assert OPAQUE.fullmatch(found), found
    assert "123457" not in found
    assert "email" not in found.partition("@")[0]
    assert str(int(NOW.timestamp())) not in found


async def test_every_attempt_at_a_row_carries_the_same_message_id() -> None:
    mailer = RecordingMailer()
    mailer.script(Outcome.transient("451 later"))
    sending = handler(mailer)
    first = claimed(7)
    retry = attrs.evolve(first, attempts=2, token=ClaimToken.from_entropy(secrets.token_bytes(16)))
    assert (await sending(first, budget=timedelta(seconds=5))).kind is OutcomeKind.TRANSIENT
    assert (await sending(retry, budget=timedelta(seconds=5))).kind is OutcomeKind.SENT
    ids = [attempt.mail.message_id for attempt in mailer.attempts]
    assert len(ids) == 2
    assert ids[0] == ids[1] == sending.message_id(first)
    # Another process (a sibling worker, a restart) computes the same one.
    assert handler(RecordingMailer()).message_id(retry) == ids[0]


def test_the_same_row_id_in_two_databases_gets_two_message_ids() -> None:
    row = claimed(7)
    production, staging = (
        handler(RecordingMailer(), "7715796635244136626/16386"),
        handler(RecordingMailer(), "7715796635244136627/16386"),
    )
    assert production.message_id(row) != staging.message_id(row)
    # Without a scope, rows of one id enqueued at different instants differ too.
    unscoped = handler(RecordingMailer())
    later = claimed(7, created_at=NOW + timedelta(microseconds=1))
    assert unscoped.message_id(row) != unscoped.message_id(later)


async def test_two_in_memory_stores_give_their_row_1s_different_message_ids() -> None:
    found = []
    for started in (NOW, NOW + timedelta(seconds=3)):
        clock = FakeClock(started)
        store = MemoryStore(clock=clock)
        store.enqueue(email_message(to="ada@example.org", subject="Hi", text="Hello"))
        [row] = await store.claim_due(
            ClaimRequest(
                lane="email",
                limit=1,
                lease=timedelta(minutes=1),
                token=ClaimToken.from_entropy(secrets.token_bytes(16)),
            )
        )
        found.append((row.id, handler(RecordingMailer()).message_id(row)))
    assert found[0][0] == found[1][0]
    assert found[0][1] != found[1][1]


def test_the_function_and_the_handler_agree() -> None:
    row = claimed(9)
    assert handler(RecordingMailer(), "s").message_id(row) == row_message_id(
        "email", 9, NOW, domain="example.org", scope="s"
    )
