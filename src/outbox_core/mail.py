# Copyright 2026 leased-outbox developers. SPDX-License-Identifier: Apache-2.0
"""Mail safety: recipient validation, control-character cleaning, injection-proof messages (C7).

Theory of operation
-------------------
Every value that reaches a message passes three gates, each meant to stop the hostile inputs of
RELIABILITY.md ("Hostile input") on its own; together they are defence in depth:

1. **Values in.** :func:`validate_address` accepts only a bare dot-atom addr-spec and returns the
   normalised form (lower-case A-label domain) that is then used, unchanged, both on the SMTP
   envelope and in the headers. :func:`check_header_value` strips control characters from
   single-line fields and refuses RFC 2047 encoded words and over-long values;
   :func:`clean_text` does the same job for bodies.
2. **Serialise.** The library writes every header itself, by rules simple enough to check by
   eye: printable ASCII that fits a 78-character line goes as itself (a display name as a
   quoted-string), anything else as base64 RFC 2047 encoded words, one per folded line; the
   addresses are the validated ones, verbatim. The MIME body is always quoted-printable (the
   stdlib's encoder, ``email.quoprimime``), written in the layout the ``email`` package itself
   gives it, so the output is 7-bit and no body line can equal the boundary (it contains ``=_``,
   a pair QP never writes). The ``email`` package is not trusted with header text:
   on CPython 3.11.7 it decodes an encoded word in a value it is given and writes a decoded
   newline back raw (a new header), drops the quotes of a long quoted display name (its ``"``
   and ``<`` become syntax), and can lose the spaces of a long subject.
3. **Verify out.** :func:`build_message` re-parses the exact bytes it produced and refuses them
   (:class:`UnsafeHeader`) unless they are 7-bit, CRLF-framed, no line is over 998 octets, and the
   headers, addresses, subject, date and MIME structure are exactly the intended ones. A bug or an
   interpreter change in gate 2 therefore stops the message instead of sending it.

The core never reads the clock or randomness: ``date`` and ``message_id`` are arguments, and the
MIME boundary is derived from the message id, so the same arguments give the same bytes.
"""

from __future__ import annotations

import base64
import email
import email.headerregistry
import email.parser
import email.policy
import email.quoprimime
import email.utils
import hashlib
import re
import reprlib
import unicodedata
from datetime import UTC, datetime
from itertools import zip_longest
from typing import TYPE_CHECKING, Any

import attrs

from outbox_core.errors import InvalidMessage, InvalidRecipient, UnsafeHeader

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "MAX_ADDRESS_LENGTH",
    "MAX_HEADER_LENGTH",
    "MAX_RECIPIENTS",
    "OutgoingMail",
    "build_message",
    "check_header_value",
    "clean_line",
    "clean_text",
    "validate_address",
]

#: RFC 5321 §4.5.3.1.3: a path is at most 256 octets including the angle brackets.
MAX_ADDRESS_LENGTH = 254
_MAX_LOCAL = 64  # RFC 5321 §4.5.3.1.1
#: RFC 5322 §2.1.1: a line is at most 998 octets, CRLF excluded.
MAX_HEADER_LENGTH = 998
#: RFC 5321 §4.5.3.1.8: servers must accept at least 100 recipients per message.
MAX_RECIPIENTS = 100

# C0, DEL and C1 (Unicode category Cc, which includes U+0085), the Unicode line and paragraph
# separators, and lone surrogates (they cannot be encoded as UTF-8 at all).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
# Controls that separate words or lines: they become a space in single-line fields.
_SPACING = re.compile("[\t\n\v\f\r\x1c-\x1f\x85\u2028\u2029]")
# Keep LF and TAB in bodies; every other unsafe character goes.
_UNSAFE_IN_BODY = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
_LINE_BREAKS = re.compile("\r\n|[\r\x85\u2028\u2029]")
# An RFC 2047 encoded word, matched more loosely than any decoder reads one (spaces and an
# RFC 2231 language tag allowed), so that nothing a decoder would decode gets past.
_ENCODED_WORD = re.compile(r"=\?([^?]*)\?([bBqQ])\?([^?]*)\?=")
# In a local part, anything that even looks like one: '=?' and '?=' are atext, so a dot-atom can
# spell an encoded word, and a parser that decodes it in an address header (the standard
# library's does) may read a line break or another address there.
_ENCODED_WORD_SYNTAX = re.compile(r"=\?.*\?=")
# The label separators of IDNA (RFC 3490 §3.1); Python's idna codec splits on each of them.
_IDNA_DOTS = re.compile("[.\u3002\uff0e\uff61]")
# RFC 5322 §3.2.3 atext; a dot-atom is atext runs joined by single dots.
_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_DOT_ATOM = re.compile(rf"{_ATEXT}(?:\.{_ATEXT})*")
_MESSAGE_ID = re.compile(rf"<{_ATEXT}(?:\.{_ATEXT})*@{_ATEXT}(?:\.{_ATEXT})*>")
_MAX_ID = 250
# RFC 1035 §2.3.1 / RFC 5890 LDH label (already lower-cased).
_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")

_PRINTABLE_ASCII = re.compile("[\x20-\x7e]*")
_FOLD_AT = 78  # RFC 5322 §2.1.1: lines SHOULD be at most 78 characters
# 45 octets -> 60 base64 characters -> a 72-character encoded word, under RFC 2047's 75.
_EW_CHUNK = 45


class _HeaderClasses(email.headerregistry.HeaderRegistry):
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


#: What the self-check reads the serialised bytes with: the stdlib's default policy.
_REPARSE_POLICY = email.policy.default.clone(header_factory=_HeaderClasses())

_repr = reprlib.Repr()
_repr.maxstring = 80
_repr.maxother = 80


def _shown(value: object) -> str:
    """A repr short enough for a log line, whatever the size of the value."""
    return _repr.repr(value)


def _refuse(raw: object, why: str) -> InvalidRecipient:
    return InvalidRecipient(f"{_shown(raw)} is not an acceptable recipient address: {why}")


# --------------------------------------------------------------------------- addresses


def validate_address(raw: str) -> str:
    """Return the normalised form of a bare addr-spec, or raise :class:`InvalidRecipient`.

    Accepted: ``local@domain`` with a dot-atom ASCII local part and a dotted host-name domain.
    Refused: display names, angle brackets, comments, whitespace, quoted local parts, control
    characters, IP literals, dotless domains and non-ASCII local parts (SMTPUTF8 is not
    supported). A Unicode domain is converted to its IDNA A-label form. The result is the
    address used on the wire, and ``validate_address(result) == result``.
    """
    if not isinstance(raw, str):
        raise _refuse(raw, f"it is of type {type(raw).__name__}, not a string")
    # Before anything else, so a huge value costs nothing more than its length.
    if len(raw) > MAX_ADDRESS_LENGTH:
        raise _refuse(raw, f"it is {len(raw)} characters long; the limit is 254 (RFC 5321)")
    bad = _UNSAFE.search(raw)
    if bad:
        raise _refuse(raw, f"it contains the control character U+{ord(bad.group()):04X}")
    if any(ch.isspace() for ch in raw):
        raise _refuse(raw, "it contains whitespace; give a bare address, no name or comment")
    if "<" in raw or ">" in raw:
        raise _refuse(raw, "it contains an angle bracket; give the bare address only")
    if '"' in raw:
        raise _refuse(raw, "quoted local parts are not accepted (rare, and an injection vehicle)")
    local, at, domain = raw.rpartition("@")
    if not at:
        raise _refuse(raw, "it has no '@'")
    if "@" in local:
        raise _refuse(raw, "it has more than one '@'")
    address = f"{_check_local(raw, local)}@{_normalise_domain(raw, domain)}"
    # The A-label form of a Unicode domain can be much longer than what was given.
    if len(address) > MAX_ADDRESS_LENGTH:
        raise _refuse(
            raw, f"its A-label form is {len(address)} octets; the limit is 254 (RFC 5321)"
        )
    return address


def _check_local(raw: str, local: str) -> str:
    if not local.isascii():
        raise _refuse(raw, "its local part is not ASCII, and SMTPUTF8 is not supported")
    if not _DOT_ATOM.fullmatch(local):
        raise _refuse(
            raw,
            f"its local part {local!r} is not a dot-atom (RFC 5322 §3.4.1): letters, digits,"
            " !#$%&'*+-/=?^_`{|}~ and single dots, not at either end",
        )
    if len(local) > _MAX_LOCAL:
        raise _refuse(raw, f"its local part is {len(local)} octets; the limit is 64 (RFC 5321)")
    if _ENCODED_WORD_SYNTAX.search(local):
        raise _refuse(
            raw,
            "its local part contains RFC 2047 encoded-word syntax ('=?' ... '?='), which a mail"
            " parser may decode into other text (a line break, another address)",
        )
    return local


def _normalise_domain(raw: str, domain: str) -> str:
    if domain.startswith("["):
        raise _refuse(raw, "IP-literal domains are not accepted; mail goes to a named domain")
    if not domain.isascii():
        domain = _a_labels(raw, domain)
    domain = domain.lower()
    labels = domain.split(".")
    if len(labels) < 2:
        raise _refuse(
            raw, f"its domain {domain!r} has no dot; a bare host name is not a mail domain"
        )
    for label in labels:
        if not _LABEL.fullmatch(label):
            raise _refuse(
                raw,
                f"its domain label {_shown(label)} is not a host-name label (RFC 1035): 1-63 letters,"
                " digits and hyphens, no hyphen at either end",
            )
    if labels[-1].isdigit():
        raise _refuse(raw, "its top-level label is all digits (an IP address is not accepted)")
    return domain


def _a_labels(raw: str, domain: str) -> str:
    """The A-label form of a Unicode domain, refused if IDNA 2003 would change what it names.

    Python's ``idna`` codec is IDNA 2003 (RFC 3490): its nameprep *maps* the IDNA 2008 deviation
    characters (``ß`` → ``ss``, the final sigma to the plain one, ZWJ/ZWNJ dropped), so ``straße.de`` would go
    out as ``strasse.de``, another registered domain under IDNA 2008 (RFC 5891), which registries
    use. The core has no IDNA 2008 tables, so a domain whose A-labels don't decode back to the
    labels given (NFC, lower-cased) is refused instead of delivered elsewhere.
    """
    try:
        ascii_form = domain.encode("idna").decode("ascii")
        back = _IDNA_DOTS.split(ascii_form.encode("ascii").decode("idna").lower())
    except UnicodeError as exc:
        raise _refuse(raw, f"its domain has no IDNA A-label form ({exc})") from exc
    given = _IDNA_DOTS.split(unicodedata.normalize("NFC", domain).lower())
    if back != given:
        before, after = next((g, b) for g, b in zip_longest(given, back, fillvalue="") if g != b)
        raise _refuse(
            raw,
            f"its domain would be changed by IDNA 2003 mapping ({before} → {after}): write the"
            " A-label form if you mean it",
        )
    return ascii_form


# --------------------------------------------------------------------------- free text


def clean_line(text: str) -> str:
    """Make ``text`` safe for a single-line field (subject, display name, template value).

    Tabs and line breaks (CR, LF, VT, FF, NEL, U+2028, U+2029) become spaces, every other
    control character is removed, and surrounding whitespace is stripped (a header line's
    leading whitespace would not survive folding anyway).
    """
    return _UNSAFE.sub("", _SPACING.sub(" ", text)).strip()


def clean_text(text: str) -> str:
    """Make ``text`` safe for a body: CRLF, CR and Unicode line breaks become LF; LF and TAB stay;
    every other control character is removed."""
    return _UNSAFE_IN_BODY.sub("", _LINE_BREAKS.sub("\n", text))


def check_header_value(value: str, *, field: str = "header value") -> str:
    """Return ``clean_line(value)``, or raise :class:`UnsafeHeader`.

    Refused: any RFC 2047 encoded word (the library encodes non-ASCII text itself, and a
    pre-encoded word would be decoded by the email package and by mail readers, so one that
    decodes to a newline, a quote or an angle bracket could add a header or change an address),
    and values longer than 998 characters after cleaning (RFC 5322 §2.1.1 limits a line to 998
    octets; longer text is no subject or name, and a limit keeps hostile sizes out of logs).

    The error names ``field``, the problem and where it is, never the value: a value is often a
    rendered template, and a rendered subject can hold a secret link that the error would copy
    into the row's last error, the logs and the requeue audit, where no scrub reaches.
    """
    if not isinstance(value, str):
        raise UnsafeHeader(f"the {field} must be a string, not {type(value).__name__}")
    cleaned = clean_line(value)
    word = _ENCODED_WORD.search(cleaned)
    if word:
        raise UnsafeHeader(
            f"the {field} contains an RFC 2047 encoded word ('=?charset?B|Q?...?=') at"
            f" character {word.start() + 1} of {len(cleaned)}; pre-encoded words are refused"
            " because decoding them could add a header or line"
        )
    if len(cleaned) > MAX_HEADER_LENGTH:
        raise UnsafeHeader(
            f"the {field} is {len(cleaned)} characters long; the limit is 998 (the RFC 5322"
            " §2.1.1 line limit)"
        )
    return cleaned


# --------------------------------------------------------------------------- messages


def _normalised_address(_inst: object, attribute: Any, value: str) -> None:  # noqa: ANN401
    if validate_address(value) != value:
        raise InvalidRecipient(
            f"{attribute.name} {_shown(value)} is not normalised; build mail with build_message()"
        )


def _normalised_recipients(inst: object, attribute: Any, value: tuple[str, ...]) -> None:  # noqa: ANN401
    if not isinstance(value, tuple) or not value:
        raise InvalidRecipient(f"{attribute.name} must be a non-empty tuple, got {_shown(value)}")
    for address in value:
        _normalised_address(inst, attribute, address)


def _message_id(_inst: object, _attribute: object, value: str) -> None:
    if not (isinstance(value, str) and len(value) <= _MAX_ID and _MESSAGE_ID.fullmatch(value)):
        raise InvalidMessage(
            f"message_id {_shown(value)} is not '<left@right>' with dot-atom ASCII halves and"
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
    message_id: str,
    date: datetime,
) -> OutgoingMail:
    """Validate every input and serialise the message (the three gates of the module docstring).

    ``to`` may be one address string or a sequence of them; repeats are dropped. Raises an
    :class:`InvalidMessage` subclass for anything unsafe; never returns a half-checked message.
    """
    _message_id(None, None, message_id)
    intended = _Intended(
        sender=validate_address(sender),
        recipients=_recipients(to),
        reply_to=None if reply_to is None else validate_address(reply_to),
        subject=check_header_value(subject, field="subject"),
        date=_utc(date),
        message_id=message_id,
    )
    name = "" if sender_name is None else check_header_value(sender_name, field="sender_name")
    headers = [
        ("From", _mailbox("From", name, intended.sender)),
        ("To", ",\r\n ".join(intended.recipients)),
        *([("Reply-To", intended.reply_to)] if intended.reply_to is not None else []),
        ("Subject", _unstructured("Subject", intended.subject)),
        ("Date", email.utils.format_datetime(intended.date)),
        ("Message-ID", message_id),
    ]
    data = _serialise(headers, text=text, html=html, message_id=message_id)
    _verify_wire(data, intended, multipart=html is not None)
    return OutgoingMail(
        envelope_from=intended.sender,
        recipients=intended.recipients,
        data=data,
        message_id=message_id,
    )


# The MIME body (gate 3 writes it, gate 3's re-parse checks it): the bytes the email package's
# EmailMessage.set_content(text, cte="quoted-printable") and add_alternative(html, ...) produce
# under the SMTP policy, written directly (tests/unit/test_mail_wire.py compares the two on random
# text), so the stdlib's slow generator is not in every send.
_TEXT_PART = (
    'Content-Type: text/{}; charset="utf-8"\r\nContent-Transfer-Encoding: quoted-printable\r\n'
)


def _serialise(
    headers: list[tuple[str, str]], *, text: str, html: str | None, message_id: str
) -> bytes:
    """The whole message: the headers as written, then the body in quoted-printable."""
    out = [f"{label}: {value}\r\n" for label, value in headers]
    plain = _quoted_printable(clean_text(text))
    if html is None:
        out += [_TEXT_PART.format("plain"), "MIME-Version: 1.0\r\n\r\n", plain]
    else:
        digest = hashlib.sha256(message_id.encode("ascii")).hexdigest()[:32]
        boundary = f"=_outbox_{digest}"
        out += [
            "MIME-Version: 1.0\r\n",
            f'Content-Type: multipart/alternative;\r\n boundary="{boundary}"\r\n\r\n',
            f"--{boundary}\r\n",
            _TEXT_PART.format("plain"),
            "\r\n",
            plain,
            f"\r\n--{boundary}\r\n",
            _TEXT_PART.format("html"),
            "MIME-Version: 1.0\r\n\r\n",
            _quoted_printable(clean_text(html)),
            f"\r\n--{boundary}--\r\n",
        ]
    return "".join(out).encode("ascii")


def _quoted_printable(text: str) -> str:
    """``text`` as UTF-8 in quoted-printable (RFC 2045 §6.7), lines of at most 78, CRLF."""
    lines = text.encode("utf-8").splitlines()
    body = email.quoprimime.body_encode((b"\n".join(lines) + b"\n").decode("latin-1"), _FOLD_AT)
    return body.replace("\n", "\r\n")


def _recipients(to: Sequence[str]) -> tuple[str, ...]:
    addresses = (to,) if isinstance(to, str) else tuple(to)
    if not addresses:
        raise InvalidRecipient("a message needs at least one recipient; 'to' is empty")
    if len(addresses) > MAX_RECIPIENTS:
        raise InvalidRecipient(
            f"a message has {len(addresses)} recipients; the limit is {MAX_RECIPIENTS}"
            " (RFC 5321 §4.5.3.1.8)"
        )
    return tuple(dict.fromkeys(validate_address(address) for address in addresses))


def _utc(date: datetime) -> datetime:
    if not isinstance(date, datetime) or date.utcoffset() is None:
        raise InvalidMessage(f"date must be a timezone-aware datetime, got {_shown(date)}")
    # In UTC, to the second: an offset with seconds has no RFC 5322 spelling.
    return date.astimezone(UTC).replace(microsecond=0)


# Header text (gate 2 of the module docstring): printable ASCII that fits a 78-character line
# (RFC 5322 §2.1.1) goes as itself; anything else as base64 encoded words of at most 75
# characters (RFC 2047 §2), one per folded line, split between characters, never inside one.


def _unstructured(label: str, value: str) -> str:
    if _PRINTABLE_ASCII.fullmatch(value) and len(label) + 2 + len(value) <= _FOLD_AT:
        return value
    return _encoded_words(value)


def _mailbox(label: str, name: str, address: str) -> str:
    if not name:
        return address
    quoted = '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if (
        _PRINTABLE_ASCII.fullmatch(name)
        and len(label) + 2 + len(quoted) + 3 + len(address) <= _FOLD_AT
    ):
        return f"{quoted} <{address}>"
    return f"{_encoded_words(name)}\r\n <{address}>"


def _encoded_words(text: str) -> str:
    chunks = [b""]
    for char in text:
        encoded = char.encode("utf-8")
        if len(chunks[-1]) + len(encoded) > _EW_CHUNK:
            chunks.append(b"")
        chunks[-1] += encoded
    words = (base64.b64encode(chunk).decode("ascii") for chunk in chunks)
    return "\r\n ".join(f"=?utf-8?b?{word}?=" for word in words)


@attrs.frozen(kw_only=True)
class _Intended:
    sender: str
    recipients: tuple[str, ...]
    reply_to: str | None
    subject: str
    date: datetime
    message_id: str


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


def _verify_wire(data: bytes, intended: _Intended, *, multipart: bool) -> None:
    """Re-parse the exact bytes and refuse them unless they say exactly what was intended."""
    lines = data.split(b"\r\n")
    if not data.isascii() or any(
        len(line) > MAX_HEADER_LENGTH or b"\r" in line or b"\n" in line for line in lines
    ):
        raise UnsafeHeader(
            "the serialised message is not 7-bit text in CRLF lines of at most 998 octets;"
            " it was not sent"
        )
    want_names = [*_HEADERS, *(["reply-to"] if intended.reply_to else [])]
    if multipart:
        want_names.remove("content-transfer-encoding")
    want_types = (
        ["multipart/alternative", "text/plain", "text/html"] if multipart else ["text/plain"]
    )
    try:
        checks = _reparse(data, intended, want_names, want_types)
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


def _reparse(
    data: bytes, intended: _Intended, want_names: list[str], want_types: list[str]
) -> list[tuple[str, object, object]]:
    """Each checked part of the message: (what, as re-parsed, as intended)."""
    # A single-part message's body is opaque to a MIME parser (its Content-Type header says so),
    # so parsing its headers alone gives the same answers for a third of the cost; a multipart
    # message is parsed whole, its parts included.
    single = want_types == ["text/plain"]
    parser = email.parser.BytesParser(policy=_REPARSE_POLICY)
    parsed = parser.parsebytes(data, headersonly=single)
    return [
        ("header names", sorted(key.lower() for key in parsed), sorted(want_names)),
        ("From", _addresses(parsed["From"]), [intended.sender]),
        ("To", _addresses(parsed["To"]), list(intended.recipients)),
        (
            "Reply-To",
            _addresses(parsed["Reply-To"]),
            [intended.reply_to] if intended.reply_to else [],
        ),
        ("Subject", str(parsed["Subject"]), intended.subject),
        ("Date", getattr(parsed["Date"], "datetime", None), intended.date),
        ("Message-ID", str(parsed["Message-ID"]), intended.message_id),
        ("MIME parts", [part.get_content_type() for part in parsed.walk()], want_types),
    ]


def _addresses(header: Any) -> list[str]:  # noqa: ANN401 - a parsed header, or None
    return [] if header is None else [address.addr_spec for address in header.addresses]
