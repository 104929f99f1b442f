"""What the example shows: the stored e-mail row (as PostgreSQL holds it) and the mail the SMTP sink
received (parsed with the standard library's ``email`` package, as a mail reader would).

Secrets are shown abbreviated: enough to see that they are there, not enough to use.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from email import message_from_bytes
from email.message import EmailMessage
from email.policy import default as default_policy
from typing import Any, Final

import attrs
import psycopg

__all__ = [
    "DeliverySeen",
    "FileSeen",
    "MailSeen",
    "StoredRow",
    "delivery_of",
    "payload_lines",
    "read_mail",
    "stored_row",
]

_STORED_ROW: Final = "SELECT status, attempts, payload FROM outbox_message WHERE id = %(id)s"
#: The delivery to one endpoint of the event the drainer made from one webhook outbox row.
_DELIVERY: Final = """
SELECT e.msg_id, d.status, d.attempts
FROM outbox_webhook_event e
JOIN outbox_webhook_delivery d ON d.event_id = e.id AND d.endpoint_id = %(endpoint_id)s
WHERE e.source_outbox_id = %(row_id)s
"""
#: Characters of a long value shown before the ellipsis.
_KEEP: Final = 32


@attrs.frozen
class StoredRow:
    """One ``outbox_message`` row: its status, attempts and payload, as stored."""

    row_id: int
    status: str
    attempts: int
    payload: dict[str, Any] = attrs.field(repr=False)

    def holds(self, text: str) -> bool:
        """``text`` appears anywhere in the stored payload (a key, a value, nested or not)."""
        return text in json.dumps(self.payload)


async def stored_row(dsn: str, row_id: int) -> StoredRow:
    """The e-mail row ``row_id`` as PostgreSQL holds it (read around the store, as an operator
    would with ``psql``)."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute(_STORED_ROW, {"id": row_id})
        record = await cur.fetchone()
    if record is None:
        raise LookupError(f"there is no outbox_message row {row_id}")
    status, attempts, payload = record
    return StoredRow(row_id, str(status), int(attempts), dict(payload))


@attrs.frozen
class DeliverySeen:
    """The delivery of the example's event to its endpoint: the ``webhook-id`` it is sent under,
    its status and attempts."""

    msg_id: str
    status: str
    attempts: int


async def delivery_of(dsn: str, webhook_row_id: int, endpoint_id: int) -> DeliverySeen | None:
    """The delivery to ``endpoint_id`` of the event fanned out from ``webhook_row_id`` (``None``
    until the drainer has fanned it out)."""
    params = {"row_id": webhook_row_id, "endpoint_id": endpoint_id}
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute(_DELIVERY, params)
        record = await cur.fetchone()
    if record is None:
        return None
    msg_id, status, attempts = record
    return DeliverySeen(str(msg_id), str(status), int(attempts))


def _short(text: str, keep: int = _KEEP) -> str:
    flat = text.replace("\n", "\\n")
    if len(flat) <= keep + 8:
        return flat
    return f"{flat[:keep]}... ({len(text)} chars)"


def _files(value: object) -> str:
    """The stored attachments, one line: names, types and sizes (the base64 cut short)."""
    if not isinstance(value, list):
        return _short(str(value))
    shown = []
    for item in value:
        if not isinstance(item, Mapping):
            shown.append(_short(str(item)))
            continue
        content = str(item.get("content", ""))
        shown.append(
            f"{item.get('filename')} ({item.get('content_type')}, {len(content)} chars of"
            f" base64: {content[:12]}...)"
        )
    return "; ".join(shown) or "(none)"


def payload_lines(payload: Mapping[str, Any], secret_keys: frozenset[str]) -> list[str]:
    """The payload, a key a line, long values abbreviated; the secret keys flagged."""
    lines = []
    for key, value in payload.items():
        shown = _files(value) if key == "attachments" else _short(str(value))
        flag = "   <- secret: scrubbed once sent" if key in secret_keys else ""
        lines.append(f"{key}: {shown}{flag}")
    return lines


@attrs.frozen
class FileSeen:
    """One attachment of a received mail, as a mail reader sees it."""

    filename: str | None
    content_type: str
    content: bytes = attrs.field(repr=False)


@attrs.frozen
class MailSeen:
    """A received mail, parsed: who it went to, its subject, its text body, its files."""

    to: str
    subject: str
    text: str = attrs.field(repr=False)
    files: tuple[FileSeen, ...]


def read_mail(data: bytes) -> MailSeen:
    """Parse the DATA bytes the sink received (``email`` package, modern policy)."""
    message = message_from_bytes(data, policy=default_policy)
    assert isinstance(message, EmailMessage)  # noqa: S101 - the default policy makes these
    body = message.get_body(preferencelist=("plain",))
    text = body.get_content() if isinstance(body, EmailMessage) else ""
    files = []
    for part in message.iter_attachments():
        assert isinstance(part, EmailMessage)  # noqa: S101
        content = part.get_content()
        raw = content if isinstance(content, bytes) else str(content).encode()
        files.append(FileSeen(part.get_filename(), part.get_content_type(), raw))
    return MailSeen(
        to=str(message.get("To", "")),
        subject=str(message.get("Subject", "")),
        text=str(text),
        files=tuple(files),
    )
