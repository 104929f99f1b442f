"""Text a broker or a peer controls, made safe for the store, the logs and a terminal.

A header value or a message id arrives from whoever published the message: it may be missing
(Kafka allows a null header value), binary, kilobytes long, or hold NUL bytes, CR/LF (which would
forge a line of a text log) or terminal escape sequences. Two rules, applied at each broker
adapter's edge and wherever such text is printed (docs/reliability.md, hostile input):

- :func:`header_text`: a raw header value as text (``None`` → ``""``, bytes decoded as UTF-8 with
  replacement characters);
- :func:`printable`: every non-printable character escaped (``\\x1b``, ``\\x00``, ``\\n``,
  ``\\u2028``, ...) and the result cut to a length, marked with ``…``;
- :func:`bounded_id`: an id fit to be a key of the store and a word of a log line: the escaped
  text when it is printable and at most :data:`MAX_ID` characters, else a readable prefix plus a
  SHA-256 of the raw text, so the same raw id always gives the same bounded id (a redelivered
  message finds its earlier park) and two different raw ids practically never collide.
"""

from __future__ import annotations

import hashlib
from typing import Final

__all__ = ["MAX_ID", "MAX_TEXT", "bounded_id", "escaped", "header_text", "printable"]

#: Longest id kept as it is (well under PostgreSQL's btree limit of about 2,700 bytes).
MAX_ID: Final = 200
#: Longest free text (a reason, a header value) shown by default.
MAX_TEXT: Final = 500
#: Characters of the escaped raw id kept in front of its hash.
_ID_PREFIX: Final = 64


def header_text(raw: bytes | str | None) -> str:
    """``raw`` as text: ``None`` is ``""``, bytes are decoded as UTF-8 (invalid bytes replaced)."""
    if raw is None:
        return ""
    if isinstance(raw, bytes):
        return raw.decode("utf-8", "replace")
    return raw


def _escape(char: str) -> str:
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def escaped(text: str) -> str:
    """``text`` with each non-printable character (space excepted) written as its escape."""
    return "".join(c if c.isprintable() else _escape(c) for c in text)


def printable(text: str, limit: int = MAX_TEXT) -> str:
    """``text`` escaped (:func:`escaped`) and cut to ``limit`` characters (the last one ``…``)."""
    safe = escaped(text)
    return safe if len(safe) <= limit else safe[: limit - 1] + "…"


def bounded_id(raw: str, limit: int = MAX_ID) -> str:
    """``raw`` when it is printable and at most ``limit`` characters long, else its escaped prefix
    and ``~sha256:`` with the hex SHA-256 of its UTF-8 bytes (lone surrogates kept)."""
    if len(raw) <= limit and raw.isprintable():
        return raw
    digest = hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{escaped(raw[:_ID_PREFIX])[:_ID_PREFIX]}~sha256:{digest}"
