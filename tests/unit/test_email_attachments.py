# Copyright 2026 leased-outbox developers. SPDX-License-Identifier: Apache-2.0
"""Attachments through the e-mail lane's enqueue helper and handler (no sockets: the recording
mailer). Enqueue refuses a bad file where the caller can catch it; a stored file that breaks a rule
(a row written by an older or foreign producer) fails the row at once, with the reason."""

from __future__ import annotations

import base64
import email
import email.policy
import secrets
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from outbox_adapters.clock import FakeClock
from outbox_adapters.crypto import AesGcmEncryptor
from outbox_adapters.lanes.email import EmailHandler, email_message
from outbox_adapters.memory import RecordingMailer
from outbox_adapters.store_rules import MAX_PAYLOAD_BYTES, payload_json
from outbox_core.errors import InvalidPayload, UnsafeHeader
from outbox_core.mail import MAX_ATTACHMENTS, MAX_ATTACHMENTS_BYTES, Attachment
from outbox_core.messages import ClaimedRow, ClaimToken
from outbox_core.outcomes import OutcomeKind
from outbox_core.payload import MAX_MESSAGE_BYTES
from outbox_core.sealing import is_sealed, open_sealed

NOW = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
PDF = b"%PDF-1.4\n" + bytes(range(256)) * 4 + b"\n%%EOF\n"
INVOICE = Attachment("invoice-42.pdf", "application/pdf", PDF)


def invoice(**overrides: Any) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "to": "ann@example.org",
        "subject": "Invoice $invoice_number",
        "text": "Your invoice is attached.",
        "fields": {"invoice_number": "INV-42"},
        "attachments": [INVOICE],
    }
    kwargs.update(overrides)
    return kwargs


def test_email_message_stores_the_files_base64_under_attachments() -> None:
    message = email_message(**invoice())
    assert message.payload["attachments"] == [
        {
            "filename": "invoice-42.pdf",
            "content_type": "application/pdf",
            "content": base64.b64encode(PDF).decode("ascii"),
        }
    ]
    triples = email_message(**invoice(attachments=[("invoice-42.pdf", "application/pdf", PDF)]))
    assert triples.payload == message.payload
    assert "attachments" not in email_message(**invoice(attachments=())).payload


def test_enqueue_refuses_a_bad_file_naming_it_by_position() -> None:
    with pytest.raises(UnsafeHeader, match=r"^attachment 2: the filename contains a control"):
        email_message(**invoice(attachments=[INVOICE, ("a\r\nBcc: x@y.pdf", "text/plain", b"")]))
    with pytest.raises(UnsafeHeader, match=r"^attachment 1: the content type is not a bare"):
        email_message(**invoice(attachments=[("a.pdf", "application/pdf; x=y", b"")]))
    with pytest.raises(InvalidPayload, match="more than 20 attachments"):
        email_message(**invoice(attachments=[INVOICE] * 21))


def test_a_template_field_may_not_be_named_attachments() -> None:
    with pytest.raises(InvalidPayload, match="'attachments' is named like a message part"):
        email_message(**invoice(fields={"attachments": "x"}))


def test_files_do_not_count_against_the_message_limit_but_the_message_still_does() -> None:
    big = Attachment("big.bin", "application/octet-stream", bytes(1_000_000))
    assert email_message(**invoice(attachments=[big]))
    with pytest.raises(InvalidPayload, match="the limit is 262,144 bytes"):
        email_message(**invoice(text="x" * 300_000, attachments=[]))
    with pytest.raises(InvalidPayload, match="the limit is 262,144 bytes"):
        email_message(**invoice(text="x" * 300_000, attachments=[big]))


def test_the_largest_files_sealed_fit_the_store_limit() -> None:
    # 20 files of 350,000 bytes (7 MB), the longest names (255 quotes: each escaped in JSON) and
    # content types (127 + 1 + 127): stored base64, then sealed, the payload must still be taken.
    count = MAX_ATTACHMENTS
    size = MAX_ATTACHMENTS_BYTES // count
    content_type = "a" * 127 + "/" + "b" * 127
    largest = [Attachment("a" + '"' * 254, content_type, bytes(size)) for _ in range(count)]
    encryptor = AesGcmEncryptor({"k1": bytes(32)}, active="k1")
    message = email_message(**invoice(attachments=largest), encryptor=encryptor)
    assert is_sealed(message.payload["attachments"])
    stored = payload_json(message.payload)  # the stores' own check: raises if over the limit
    # The room left for files beside the message is enough, and not much more than enough.
    room = MAX_PAYLOAD_BYTES - MAX_MESSAGE_BYTES
    assert room - 10_000 < len(stored.encode()) <= room
    opened = open_sealed(message.payload, lane="email", encryptor=encryptor)
    assert len(opened["attachments"]) == count


def row(payload: object) -> ClaimedRow:
    return ClaimedRow(
        id=7,
        lane="email",
        payload=payload,  # type: ignore[arg-type]  # foreign payloads are the point
        attempts=1,
        token=ClaimToken.from_entropy(secrets.token_bytes(16)),
        lease_expires_at=NOW + timedelta(minutes=5),
        created_at=NOW,
    )


def handler(mailer: RecordingMailer) -> EmailHandler:
    return EmailHandler(mailer, sender="noreply@shop.example", clock=FakeClock(NOW))


async def test_the_handler_sends_the_files() -> None:
    mailer = RecordingMailer()
    outcome = await handler(mailer)(
        row(email_message(**invoice()).payload), budget=timedelta(seconds=60)
    )
    assert outcome.kind is OutcomeKind.SENT
    [mail] = mailer.sent
    parsed = email.message_from_bytes(mail.data, policy=email.policy.default)
    [part] = parsed.iter_attachments()
    assert (part.get_filename(), part.get_content_type()) == ("invoice-42.pdf", "application/pdf")
    assert part.get_payload(decode=True) == PDF


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ({"filename": "../../a.pdf"}, "attachment 1: the filename contains a path separator"),
        ({"filename": "a\r\nBcc: x@y"}, "attachment 1: the filename contains a control"),
        ({"content_type": "text/html; x"}, "attachment 1: the content type is not a bare"),
        ({"content_type": "multipart/mixed"}, "attachment 1: the content type is multipart"),
        ({"content": "JVBERi0x\nLjQ="}, "attachment 1: the content is not canonical base64"),
        ({"content": "QR=="}, "attachment 1: the content is not canonical base64"),
        ({"extra": 1}, "attachment 1: an attachment is a JSON object with exactly the keys"),
    ],
)
async def test_a_stored_file_that_breaks_a_rule_fails_the_row_at_once(
    bad: dict[str, Any], reason: str
) -> None:
    payload = email_message(**invoice()).payload
    payload = {**payload, "attachments": [{**payload["attachments"][0], **bad}]}
    mailer = RecordingMailer()
    outcome = await handler(mailer)(row(payload), budget=timedelta(seconds=60))
    assert outcome.kind is OutcomeKind.PERMANENT
    assert outcome.reason is not None
    assert outcome.reason.startswith(f"undeliverable: {reason}")
    assert mailer.count() == 0


async def test_stored_attachments_that_are_not_a_list_fail_the_row() -> None:
    payload = {**email_message(**invoice()).payload, "attachments": {"a": 1}}
    mailer = RecordingMailer()
    outcome = await handler(mailer)(row(payload), budget=timedelta(seconds=60))
    assert outcome.kind is OutcomeKind.PERMANENT
    assert "'attachments' must be a list" in (outcome.reason or "")


async def test_sealed_files_are_opened_in_memory_and_sent() -> None:
    encryptor = AesGcmEncryptor({"k1": bytes(range(32))}, active="k1")
    payload = email_message(**invoice(), encryptor=encryptor).payload
    assert is_sealed(payload["attachments"])  # at rest: ciphertext, no filename, no bytes
    assert "invoice-42.pdf" not in str(payload)
    mailer = RecordingMailer()
    sending = EmailHandler(
        mailer, sender="noreply@shop.example", clock=FakeClock(NOW), encryptor=encryptor
    )
    outcome = await sending(row(payload), budget=timedelta(seconds=60))
    assert outcome.kind is OutcomeKind.SENT
    [mail] = mailer.sent
    parsed = email.message_from_bytes(mail.data, policy=email.policy.default)
    [part] = parsed.iter_attachments()
    assert part.get_payload(decode=True) == PDF
