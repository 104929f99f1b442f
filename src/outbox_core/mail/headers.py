# Copyright 2026 leased-outbox developers. SPDX-License-Identifier: Apache-2.0
"""Header text: control characters out of free text, and header values written by the library.

Checks (gate 1 of :mod:`outbox_core.mail`): :func:`clean_line` and :func:`check_header_value` for
single-line fields, :func:`clean_text` for bodies. Writing (gate 2): printable ASCII that fits a
78-character line (RFC 5322 §2.1.1) goes as itself; anything else as base64 RFC 2047 encoded words
of at most 75 characters (RFC 2047 §2), one per folded line, split between characters, never inside
one.
"""

from __future__ import annotations

import base64
import re
import reprlib

from outbox_core.errors import UnsafeHeader

__all__ = ["MAX_HEADER_LENGTH", "check_header_value", "clean_line", "clean_text"]

#: RFC 5322 §2.1.1: a line is at most 998 octets, CRLF excluded.
MAX_HEADER_LENGTH = 998

# C0, DEL and C1 (Unicode category Cc, which includes U+0085), the Unicode line and paragraph
# separators, and lone surrogates (they cannot be encoded as UTF-8 at all).
UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
# Controls that separate words or lines: they become a space in single-line fields.
_SPACING = re.compile("[\t\n\v\f\r\x1c-\x1f\x85\u2028\u2029]")
# Keep LF and TAB in bodies; every other unsafe character goes.
_UNSAFE_IN_BODY = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
_LINE_BREAKS = re.compile("\r\n|[\r\x85\u2028\u2029]")
# An RFC 2047 encoded word, matched more loosely than any decoder reads one (spaces and an
# RFC 2231 language tag allowed), so that nothing a decoder would decode gets past.
ENCODED_WORD = re.compile(r"=\?([^?]*)\?([bBqQ])\?([^?]*)\?=")

_PRINTABLE_ASCII = re.compile("[\x20-\x7e]*")
#: RFC 5322 §2.1.1: lines SHOULD be at most 78 characters.
FOLD_AT = 78
# 45 octets -> 60 base64 characters -> a 72-character encoded word, under RFC 2047's 75.
_EW_CHUNK = 45

_repr = reprlib.Repr()
_repr.maxstring = 80
_repr.maxother = 80


def shown(value: object) -> str:
    """A repr short enough for a log line, whatever the size of the value."""
    return _repr.repr(value)


# --------------------------------------------------------------------------- free text


def clean_line(text: str) -> str:
    """Make ``text`` safe for a single-line field (subject, display name, template value).

    Tabs and line breaks (CR, LF, VT, FF, NEL, U+2028, U+2029) become spaces, every other
    control character is removed, and surrounding whitespace is stripped (a header line's
    leading whitespace would not survive folding anyway).
    """
    return UNSAFE.sub("", _SPACING.sub(" ", text)).strip()


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
    word = ENCODED_WORD.search(cleaned)
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


# --------------------------------------------------------------------------- writing headers


def unstructured(label: str, value: str) -> str:
    """An unstructured header value (Subject) as written after ``label: ``."""
    if _PRINTABLE_ASCII.fullmatch(value) and len(label) + 2 + len(value) <= FOLD_AT:
        return value
    return _encoded_words(value)


def mailbox(label: str, name: str, address: str) -> str:
    """A mailbox (From) as written after ``label: ``: the address, with the name quoted or encoded."""
    if not name:
        return address
    quoted = '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if (
        _PRINTABLE_ASCII.fullmatch(name)
        and len(label) + 2 + len(quoted) + 3 + len(address) <= FOLD_AT
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
