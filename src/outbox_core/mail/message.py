# Copyright 2026 leased-outbox developers. SPDX-License-Identifier: Apache-2.0
"""The message builder: every input validated, the bytes written, the bytes checked.

:func:`build_message` runs the three gates of :mod:`outbox_core.mail` in order and returns an
:class:`OutgoingMail` (envelope + exact DATA bytes) only when all three pass.
"""

from __future__ import annotations

import email.utils
import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import attrs

from outbox_core.errors import InvalidMessage, InvalidRecipient
from outbox_core.mail.addresses import ATEXT, recipient_list, validate_address
from outbox_core.mail.attachments import check_attachments
from outbox_core.mail.headers import check_header_value, mailbox, shown, unstructured
from outbox_core.mail.mime import serialise
from outbox_core.mail.verify import Intended, verify_wire

if TYPE_CHECKING:
    from collections.abc import Sequence

    from outbox_core.mail.attachments import Attachment

__all__ = ["OutgoingMail", "build_message"]

_MESSAGE_ID = re.compile(rf"<{ATEXT}(?:\.{ATEXT})*@{ATEXT}(?:\.{ATEXT})*>")
_MAX_ID = 250


def _normalised_address(_inst: object, attribute: Any, value: str) -> None:  # noqa: ANN401
    if validate_address(value) != value:
        raise InvalidRecipient(
            f"{attribute.name} {shown(value)} is not normalised; build mail with build_message()"
        )


def _normalised_recipients(inst: object, attribute: Any, value: tuple[str, ...]) -> None:  # noqa: ANN401
    if not isinstance(value, tuple) or not value:
        raise InvalidRecipient(f"{attribute.name} must be a non-empty tuple, got {shown(value)}")
    for address in value:
        _normalised_address(inst, attribute, address)


def _message_id(_inst: object, _attribute: object, value: str) -> None:
    if not (isinstance(value, str) and len(value) <= _MAX_ID and _MESSAGE_ID.fullmatch(value)):
        raise InvalidMessage(
            f"message_id {shown(value)} is not '<left@right>' with dot-atom ASCII halves and"
            f" at most {_MAX_ID} characters (RFC 5322 §3.6.4)"
        )


@attrs.frozen
class OutgoingMail:
    """A message ready for SMTP: the envelope and the exact DATA bytes. Made by build_message()."""

    #: The envelope sender (``MAIL FROM``), validated and normalised.
    envelope_from: str = attrs.field(validator=_normalised_address)
    #: The envelope recipients (``RCPT TO``), validated, normalised, in order, without repeats.
    recipients: tuple[str, ...] = attrs.field(validator=_normalised_recipients)
    #: The exact DATA bytes: 7-bit, CRLF line endings (dot-stuffing is the SMTP client's job).
    data: bytes = attrs.field(validator=attrs.validators.instance_of(bytes), repr=False)
    #: The Message-ID header value, ``<left@right>``.
    message_id: str = attrs.field(validator=_message_id)


def build_message(  # noqa: PLR0913 - keyword-only, one argument per header
    *,
    sender: str,
    to: Sequence[str],
    subject: str,
    text: str,
    html: str | None = None,
    sender_name: str | None = None,
    reply_to: str | None = None,
    attachments: Sequence[Attachment | tuple[str, str, bytes]] = (),
    message_id: str,
    date: datetime,
) -> OutgoingMail:
    """Validate every input and serialise the message (the three gates of :mod:`outbox_core.mail`).

    ``to`` may be one address string or a sequence of them; repeats are dropped. ``attachments``
    are :class:`~outbox_core.mail.attachments.Attachment` objects or ``(filename, content_type,
    content)`` triples; with any, the message is a multipart/mixed. Raises an
    :class:`InvalidMessage` subclass for anything unsafe; never returns a half-checked message.
    """
    _message_id(None, None, message_id)
    intended = Intended(
        sender=validate_address(sender),
        recipients=recipient_list(to),
        reply_to=None if reply_to is None else validate_address(reply_to),
        subject=check_header_value(subject, field="subject"),
        date=_utc(date),
        message_id=message_id,
        html=html is not None,
        attachments=check_attachments(attachments) if attachments else (),
    )
    name = "" if sender_name is None else check_header_value(sender_name, field="sender_name")
    headers = [
        ("From", mailbox("From", name, intended.sender)),
        ("To", ",\r\n ".join(intended.recipients)),
        *([("Reply-To", intended.reply_to)] if intended.reply_to is not None else []),
        ("Subject", unstructured("Subject", intended.subject)),
        ("Date", email.utils.format_datetime(intended.date)),
        ("Message-ID", message_id),
    ]
    data = serialise(
        headers, text=text, html=html, attachments=intended.attachments, message_id=message_id
    )
    verify_wire(data, intended)
    return OutgoingMail(
        envelope_from=intended.sender,
        recipients=intended.recipients,
        data=data,
        message_id=message_id,
    )


def _utc(date: datetime) -> datetime:
    if not isinstance(date, datetime) or date.utcoffset() is None:
        raise InvalidMessage(f"date must be a timezone-aware datetime, got {shown(date)}")
    # In UTC, to the second: an offset with seconds has no RFC 5322 spelling.
    return date.astimezone(UTC).replace(microsecond=0)
