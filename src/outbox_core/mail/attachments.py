# Copyright 2026 leased-outbox developers. SPDX-License-Identifier: Apache-2.0
"""Attachments: a filename, a content type and bytes, checked where they go in and where they come back.

Theory of operation
-------------------
An e-mail payload carries its files as a list under the ``attachments`` key, one JSON object each::

    {"filename": "invoice-42.pdf", "content_type": "application/pdf", "content": "<base64>"}

``attachments`` is one of the default scrub keys (:data:`outbox_core.scrub.DEFAULT_SECRET_KEYS`):
the mark that makes a row dispatched or skipped removes the files in the same UPDATE, as it
removes the secret links. An invoice PDF is a document for its recipient, not part of the delivery
record, and a sent row kept for years should not be a copy of every file ever mailed.

The rules hold in both directions. :class:`Attachment` checks its own fields when it is made (by
the producer, through ``email_message``); :func:`attachments_from_json` reads a stored list under
the same rules, so a row written by an older or foreign producer that breaks one is refused at
send time (an :class:`~outbox_core.errors.InvalidMessage`, which fails the row at once):

* **filename**: written into a header parameter, so it is held to a header value's rules and more:
  no control characters, no bidirectional-text controls (``invoice\\u202efdp.exe`` would show as
  ``invoiceexe.pdf``), no ``/`` or ``\\`` (a path), not wrapped in ``"`` (mail readers unquote
  ``"x"`` to ``x``), not ``.`` or ``..``, no surrounding whitespace,
  no RFC 2047 encoded word (mail readers decode them in filenames too), at most 255 octets of
  UTF-8 (the common file-system limit). Non-ASCII names are written in RFC 2231 form
  (``filename*=utf-8''...``) by :mod:`outbox_core.mail.mime`.
* **content type**: a bare ``type/subtype`` of RFC 6838 §4.2 names (no parameters, so nothing can
  be smuggled after a ``;``), stored lower-case; ``multipart/*`` and ``message/*`` are refused
  (RFC 2045 §6.4: composite types can't be base64-encoded, and a reader would parse the file as
  message structure).
* **content**: bytes, in the payload as canonical base64 (RFC 4648 §4, padded, no line breaks, no
  other alphabet); anything a lenient decoder would have to guess at is refused.
* **sizes**: at most :data:`MAX_ATTACHMENT_BYTES` per file, :data:`MAX_ATTACHMENTS_BYTES` in
  all and :data:`MAX_ATTACHMENTS` files. 7 MB of files is 9.6 MB as base64 in 76-character lines,
  so a message with ordinary bodies stays under Postfix's default ``message_size_limit``
  (10,240,000 bytes), the smallest limit in common use.

Errors name the attachment (by position) and the problem, never the filename or the content.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import TYPE_CHECKING, Any, Final

import attrs

from outbox_core.errors import InvalidPayload, UnsafeHeader
from outbox_core.mail.headers import ENCODED_WORD, UNSAFE

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

__all__ = [
    "ATTACHMENTS_KEY",
    "MAX_ATTACHMENTS",
    "MAX_ATTACHMENTS_BYTES",
    "MAX_ATTACHMENT_BYTES",
    "MAX_FILENAME_OCTETS",
    "Attachment",
    "attachments_from_json",
    "attachments_to_json",
    "check_attachments",
]

#: The payload key that holds an e-mail's attachments (a default scrub key).
ATTACHMENTS_KEY: Final = "attachments"
#: At most this many files per message.
MAX_ATTACHMENTS: Final = 20
#: The largest file, decoded: 5 MB.
MAX_ATTACHMENT_BYTES: Final = 5_000_000
#: The largest sum of a message's files, decoded: 7 MB.
MAX_ATTACHMENTS_BYTES: Final = 7_000_000
#: The longest filename, in octets of UTF-8 (NAME_MAX of the common file systems).
MAX_FILENAME_OCTETS: Final = 255

# RFC 6838 §4.2: type-name and subtype-name are restricted-names of 1 to 127 characters.
_NAME = r"[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}"
_CONTENT_TYPE = re.compile(rf"({_NAME})/({_NAME})")
_COMPOSITE = frozenset({"multipart", "message"})
# Unicode bidirectional formatting characters (Unicode TR 9): they reorder what a reader shows.
_BIDI = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_JSON_KEYS = frozenset({"filename", "content_type", "content"})


def _filename(_inst: object, _attribute: object, value: str) -> None:
    if not isinstance(value, str):
        raise UnsafeHeader(f"the filename must be a string, not {type(value).__name__}")
    where = f"at character {{}} of {len(value)}"
    for pattern, what in ((UNSAFE, "a control character"), (_BIDI, "a bidirectional control")):
        bad = pattern.search(value)
        if bad:
            raise UnsafeHeader(
                f"the filename contains {what} (U+{ord(bad.group()):04X})"
                f" {where.format(bad.start() + 1)}"
            )
    if "/" in value or "\\" in value:
        raise UnsafeHeader("the filename contains a path separator ('/' or '\\'); give a name only")
    if len(value) >= 2 and value[0] == value[-1] == '"':
        # Mail readers (and the re-parse check) unquote a parameter value once more: '"x"' reads
        # as 'x'. A quote inside a name is kept; a name quoted whole is refused.
        raise UnsafeHeader("the filename is wrapped in double quotes, which mail readers strip")
    if value.strip() in {"", ".", ".."} or value != value.strip():
        raise UnsafeHeader(
            "the filename is empty, '.' or '..', or has surrounding whitespace; give a file name"
        )
    word = ENCODED_WORD.search(value)
    if word:
        raise UnsafeHeader(
            f"the filename contains an RFC 2047 encoded word {where.format(word.start() + 1)};"
            " mail readers would decode it into other text"
        )
    octets = len(value.encode("utf-8"))
    if octets > MAX_FILENAME_OCTETS:
        raise UnsafeHeader(
            f"the filename is {octets} octets of UTF-8; the limit is {MAX_FILENAME_OCTETS}"
        )


def _content_type(value: object) -> str:
    if not isinstance(value, str):
        raise UnsafeHeader(f"the content type must be a string, not {type(value).__name__}")
    match = _CONTENT_TYPE.fullmatch(value)
    if match is None:
        raise UnsafeHeader(
            "the content type is not a bare 'type/subtype' of RFC 6838 names (letters, digits and"
            " !#$&^_.+- , at most 127 each, no parameters)"
        )
    if match.group(1).lower() in _COMPOSITE:
        raise UnsafeHeader(
            f"the content type is {match.group(1).lower()}/*, which can't be attached as a file"
            " (RFC 2045 §6.4: a composite type is never base64-encoded)"
        )
    return value.lower()


def _content(_inst: object, _attribute: object, value: bytes) -> None:
    if not isinstance(value, bytes):
        raise InvalidPayload(f"the content must be bytes, not {type(value).__name__}")
    if len(value) > MAX_ATTACHMENT_BYTES:
        raise InvalidPayload(
            f"the file is {len(value):,} bytes; the limit is {MAX_ATTACHMENT_BYTES:,} bytes a file"
        )


@attrs.frozen
class Attachment:
    """A file attached to an e-mail. Each field is checked when the attachment is made."""

    #: The file's name as the recipient sees it (no path). Non-ASCII is fine.
    filename: str = attrs.field(validator=_filename)
    #: ``type/subtype``, no parameters; stored lower-case.
    content_type: str = attrs.field(converter=_content_type)
    #: The file's bytes.
    content: bytes = attrs.field(validator=_content, repr=False)

    def to_json(self) -> dict[str, str]:
        """The payload form: the content as canonical base64."""
        return {
            "filename": self.filename,
            "content_type": self.content_type,
            "content": base64.b64encode(self.content).decode("ascii"),
        }

    @classmethod
    def from_json(cls, value: object) -> Attachment:
        """Read the payload form; raises :class:`InvalidPayload` or :class:`UnsafeHeader`."""
        if not isinstance(value, dict) or value.keys() != _JSON_KEYS:
            raise InvalidPayload(
                "an attachment is a JSON object with exactly the keys 'filename', 'content_type'"
                " and 'content'"
            )
        return cls(value["filename"], value["content_type"], _strict_base64(value["content"]))


def _strict_base64(text: object) -> bytes:
    if not isinstance(text, str):
        raise InvalidPayload(f"the content must be a base64 string, not {type(text).__name__}")
    # Sized before it is decoded: a huge string is refused for the cost of its length.
    if len(text) > 4 * -(-MAX_ATTACHMENT_BYTES // 3):
        raise InvalidPayload(
            f"the content is {len(text):,} characters of base64, more than a file of"
            f" {MAX_ATTACHMENT_BYTES:,} bytes can be"
        )
    try:
        content = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):  # ValueError: a non-ASCII character
        content = None
    # Canonical: the one spelling b64encode gives (padding, zero spare bits, no line breaks).
    if content is None or base64.b64encode(content).decode("ascii") != text:
        raise InvalidPayload(
            "the content is not canonical base64 (RFC 4648 §4: the standard alphabet, padded with"
            " '=', no line breaks or spaces)"
        )
    return content


def check_attachments(
    attachments: Iterable[Attachment | tuple[str, str, bytes]],
) -> tuple[Attachment, ...]:
    """The attachments as a checked tuple: each an :class:`Attachment` or a ``(filename,
    content_type, content)`` triple made into one. Raises :class:`InvalidPayload` or
    :class:`UnsafeHeader` naming the attachment by position: too many, too large together, or one
    that breaks a rule of its own."""
    return _checked(attachments, _attachment)


def attachments_from_json(value: object) -> tuple[Attachment, ...]:
    """Read a payload's ``attachments`` list under every rule of this module."""
    if not isinstance(value, list):
        raise InvalidPayload(
            f"payload field {ATTACHMENTS_KEY!r} must be a list, not {type(value).__name__}"
        )
    return _checked(value, Attachment.from_json)


def attachments_to_json(
    attachments: Iterable[Attachment | tuple[str, str, bytes]],
) -> list[dict[str, Any]]:
    """The payload form of the attachments, checked first (see :func:`check_attachments`)."""
    return [attachment.to_json() for attachment in check_attachments(attachments)]


def _attachment(item: object) -> Attachment:
    if isinstance(item, Attachment):
        return item
    if isinstance(item, tuple) and len(item) == 3:
        return Attachment(*item)
    raise InvalidPayload(
        f"an attachment is an Attachment or a (filename, content_type, content) tuple, not"
        f" {type(item).__name__}"
    )


def _checked(items: Iterable[Any], make: Callable[[Any], Attachment]) -> tuple[Attachment, ...]:
    found: list[Attachment] = []
    total = 0
    for index, item in enumerate(items):
        if index == MAX_ATTACHMENTS:  # counted before the next one is decoded
            raise InvalidPayload(
                f"a message has more than {MAX_ATTACHMENTS} attachments; the limit is"
                f" {MAX_ATTACHMENTS}"
            )
        try:
            attachment = make(item)
        except (InvalidPayload, UnsafeHeader) as exc:
            raise type(exc)(f"attachment {index + 1}: {exc}") from None
        total += len(attachment.content)
        if total > MAX_ATTACHMENTS_BYTES:
            raise InvalidPayload(
                f"the attachments are more than {MAX_ATTACHMENTS_BYTES:,} bytes together"
                f" (after attachment {index + 1}); the limit is {MAX_ATTACHMENTS_BYTES:,} bytes"
                " a message"
            )
        found.append(attachment)
    return tuple(found)
