# Copyright 2026 leased-outbox developers. SPDX-License-Identifier: Apache-2.0
"""The self-check (gate 3 of :mod:`outbox_core.mail`): the exact bytes, re-parsed, must say what was meant.

:func:`verify_wire` refuses the serialised message (:class:`UnsafeHeader`) unless it is 7-bit,
CRLF-framed, no line is over 998 octets, and the headers, addresses, subject, date, MIME structure
and attachments (each one's filename, content type and decoded bytes) are exactly the intended
ones, as the standard library's parser reads them. A bug or an interpreter change in the writer
therefore stops the message instead of sending it.
"""

from __future__ import annotations

import email.headerregistry
import email.parser
import email.policy
import email.utils
import re
from datetime import datetime
from typing import TYPE_CHECKING, Any

import attrs

from outbox_core.errors import UnsafeHeader
from outbox_core.mail.addresses import DOT_ATOM
from outbox_core.mail.attachments import Attachment
from outbox_core.mail.headers import MAX_HEADER_LENGTH

if TYPE_CHECKING:
    from email.message import Message


__all__: list[str] = []


class HeaderClasses(email.headerregistry.HeaderRegistry):
    """The standard registry, making each header class once.

    The stdlib's registry builds a new class (``type(...)``) for every header object it makes,
    which is most of the cost of reading a parsed message's headers; the classes depend only on
    the header's name, so they are kept. What the parser and the header objects do is unchanged.
    """

    def __init__(self) -> None:
        super().__init__()
        self._made: dict[str, type[email.headerregistry.BaseHeader]] = {}

    def __getitem__(self, name: str) -> type[email.headerregistry.BaseHeader]:
        key = name.lower()
        made = self._made.get(key)
        if made is None:
            made = self._made[key] = super().__getitem__(name)
        return made


#: How the self-check reads the checked headers' values: the stdlib's default policy (its header
#: classes: address lists, unstructured text, dates).
_REPARSE_POLICY = email.policy.default.clone(header_factory=HeaderClasses())

#: How it splits the bytes into headers and MIME parts: the same feedparser under ``compat32``,
#: which keeps each header's raw value instead of building a header object for every header of
#: every part (and again on every internal ``get_content_type`` the parser makes while it finds
#: the part boundaries): building them would be 70 % of a message's CPU. The headers the check
#: compares are then read through :data:`_REPARSE_POLICY`'s ``header_fetch_parse``, exactly what
#: an access under the default policy does (the two policies' ``header_source_parse`` are the same
#: code), so they are parsed by the same classes as by default; the MIME types and attachment
#: parameters are read by ``email.message.Message``'s own parameter parser (ADR 0012).
_SPLIT_POLICY = email.policy.compat32


@attrs.frozen(kw_only=True)
class Intended:
    """What a message must say, as :func:`~outbox_core.mail.build_message` validated it."""

    sender: str
    recipients: tuple[str, ...]
    reply_to: str | None
    subject: str
    date: datetime
    message_id: str
    html: bool = False
    attachments: tuple[Attachment, ...] = ()


# The only headers a message may carry (lower-cased), plus Reply-To when one is given.
_HEADERS = (
    "content-transfer-encoding",
    "content-type",
    "date",
    "from",
    "message-id",
    "mime-version",
    "subject",
    "to",
)


def verify_wire(data: bytes, intended: Intended) -> None:
    """Re-parse the exact bytes and refuse them unless they say exactly what was intended."""
    lines = data.split(b"\r\n")
    if not data.isascii() or any(
        len(line) > MAX_HEADER_LENGTH or b"\r" in line or b"\n" in line for line in lines
    ):
        raise UnsafeHeader(
            "the serialised message is not 7-bit text in CRLF lines of at most 998 octets;"
            " it was not sent"
        )
    try:
        checks = _reparse(data, intended)
    except Exception as exc:  # noqa: BLE001 - whatever the parser raises, the answer is "not sent"
        # E.g. ValueError("address parts cannot contain CR or LF") for an address that decodes
        # to a line break. Named by type only: the parser's text may quote the message.
        raise UnsafeHeader(
            f"the serialised message could not be re-parsed ({type(exc).__name__}); it was not sent"
        ) from None
    for what, got, want in checks:
        if got != want:
            # Which part differs, never the values: they are rendered text (a subject can hold a
            # secret link) and must not reach the row's last error or the logs.
            raise UnsafeHeader(
                f"the serialised message does not re-parse as intended ({what} differ);"
                " it was not sent"
            )


def _wanted(intended: Intended) -> tuple[list[str], list[str]]:
    """The header names and the MIME types (in walk order) the message must have."""
    names = [*_HEADERS, *(["reply-to"] if intended.reply_to else [])]
    types = (
        ["multipart/alternative", "text/plain", "text/html"] if intended.html else ["text/plain"]
    )
    if intended.attachments:
        types = ["multipart/mixed", *types, *(a.content_type for a in intended.attachments)]
    if intended.html or intended.attachments:  # a multipart: the encoding is each part's
        names.remove("content-transfer-encoding")
    return names, types


def _reparse(data: bytes, intended: Intended) -> list[tuple[str, object, object]]:
    """Each checked part of the message: (what, as re-parsed, as intended)."""
    want_names, want_types = _wanted(intended)
    # A single-part message's body is opaque to a MIME parser (its Content-Type header says so),
    # so parsing its headers alone gives the same answers for a third of the cost; a multipart
    # message is parsed whole, its parts included.
    single = want_types == ["text/plain"]
    parser = email.parser.BytesParser(policy=_SPLIT_POLICY)
    parsed = parser.parsebytes(data, headersonly=single)

    def unfolded(name: str) -> str | None:
        # What the default policy's header_fetch_parse does before it builds a header object.
        raw = parsed.get(name)
        return None if raw is None else raw.replace("\r", "").replace("\n", "")

    def header(name: str) -> Any:  # noqa: ANN401 - a header object of the default policy, or None
        value = unfolded(name)
        return None if value is None else _REPARSE_POLICY.header_factory(name, value)

    def addresses(name: str, want: list[str]) -> list[str]:
        # Plain bare addresses written exactly as intended read back as themselves (see
        # _plain_list); anything else (a display name, a difference) goes through the parser.
        if _plain_list(unfolded(name), want):
            return want
        return _addresses(header(name))

    sender, recipients = [intended.sender], list(intended.recipients)
    reply_to = [intended.reply_to] if intended.reply_to else []
    return [
        ("header names", sorted(key.lower() for key in parsed), sorted(want_names)),
        ("From", addresses("From", sender), sender),
        ("To", addresses("To", recipients), recipients),
        ("Reply-To", addresses("Reply-To", reply_to), reply_to),
        ("Subject", str(header("Subject")), intended.subject),
        ("Date", _date(unfolded("Date")), intended.date),
        # The exact text: the intended id is a validated <left@right>, nothing to decode.
        ("Message-ID", unfolded("Message-ID"), intended.message_id),
        ("MIME parts", [part.get_content_type() for part in parsed.walk()], want_types),
        (
            "attachments",
            [_attachment(part) for part in parsed.walk() if _is_attachment(part)],
            [("attachment", a.filename, a.content_type, a.content) for a in intended.attachments],
        ),
    ]


def _date(value: str | None) -> datetime | None:
    """The Date header's instant as the default policy's ``DateHeader`` reads it (the same
    ``parsedate_to_datetime``), without building the header object; ``None`` when unreadable."""
    if not value:
        return None
    try:
        return email.utils.parsedate_to_datetime(value)
    except ValueError:
        return None


def _is_attachment(part: Message) -> bool:
    # Any part with a Content-Disposition counts: the text parts have none, so a disposition
    # found where none was written (or an inline one) is a difference too.
    return part.get("Content-Disposition") is not None


def _attachment(part: Message) -> tuple[object, ...]:
    return (
        part.get_content_disposition(),
        part.get_filename(),
        part.get_content_type(),
        part.get_payload(decode=True),
    )


#: A bare addr-spec that the RFC 5322 grammar reads one way only: a dot-atom local part (no
#: ``=?``, which a parser may take for an encoded word) at a dotted LDH host name.
_PLAIN_ADDRESS = re.compile(rf"{DOT_ATOM}@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+")


def _plain_list(value: str | None, want: list[str]) -> bool:
    """Whether an address header's unfolded ``value`` is exactly ``want`` joined by ``", "``, each
    a plain bare address (:data:`_PLAIN_ADDRESS`, no ``=?``).

    Such a value holds no display name, comment, quoted string, group, encoded word or folding
    white space, so it reads back as exactly ``want``: the default policy's parser gives the same
    addr-specs (``tests/unit/test_mail_verify_fast_path.py`` proves it on generated addresses).
    This spares the parse (about 40 % of a message's self-check) in the common case; any other
    value is parsed, so a writer that wrote anything else is still caught.
    """
    return (
        bool(want)
        and value == ", ".join(want)
        and all(_PLAIN_ADDRESS.fullmatch(a) and "=?" not in a for a in want)
    )


def _addresses(header: Any) -> list[str]:  # noqa: ANN401 - a parsed header, or None
    return [] if header is None else [address.addr_spec for address in header.addresses]
