# Copyright 2026 leased-outbox developers. SPDX-License-Identifier: Apache-2.0
"""The MIME body, written directly (gate 2 of :mod:`outbox_core.mail`).

Text parts are quoted-printable (the stdlib's encoder, ``email.quoprimime``), in the layout the
``email`` package's ``EmailMessage.set_content(text, cte="quoted-printable")`` and
``add_alternative(html, ...)`` give under the SMTP policy (tests/unit/test_mail_wire.py compares
the two on random text), so the stdlib's slow generator is not in every send. A message without
attachments is one text/plain part, or a multipart/alternative of text and HTML: attachments add
no work to that path.

With attachments the message is a multipart/mixed: the text (or the alternative) first, then one
base64 part per file, in 76-character lines (RFC 2045 §6.8), with a ``Content-Disposition:
attachment`` naming the file. A printable-ASCII name that fits the line goes as a quoted-string;
any other name in RFC 2231 form (``filename*=utf-8''%E2%82%AC...``, percent-encoded by
``email.utils.encode_rfc2231``), split into numbered continuations (``filename*0*=``,
``filename*1*=``, RFC 2231 §3) so no line passes 78 characters.

Boundaries are derived from the message id (the same arguments give the same bytes) and contain
``=_``, which neither quoted-printable nor base64 ever writes, so no body line can equal one; the
mixed and the alternative boundaries differ from their tenth character, so neither is a prefix of
the other (a parser that matches prefixes would otherwise end a part early).
"""

from __future__ import annotations

import base64
import email.quoprimime
import email.utils
import hashlib
import re
from typing import TYPE_CHECKING

from outbox_core.mail.headers import FOLD_AT, clean_text

if TYPE_CHECKING:
    from collections.abc import Sequence

    from outbox_core.mail.attachments import Attachment

__all__: list[str] = []

_TEXT_PART = (
    'Content-Type: text/{}; charset="utf-8"\r\nContent-Transfer-Encoding: quoted-printable\r\n'
)
# Filenames written as a quoted-string: printable ASCII without '"' and '\' (no quoted-pairs).
_PLAIN_FILENAME = re.compile(r"[A-Za-z0-9 !#$&'()+,.=@\[\]^_{}~-]+")
_FILENAME_LINE = ' filename="";'  # the folded line a quoted filename goes on, without the name
# RFC 2231 continuations: at most this many characters of percent-encoded name a line.
_CONTINUATION = 60
# One character of the percent-encoded UTF-8: a lead octet and its continuation octets, an ASCII
# octet, or a character left as itself. Lines break between characters, never inside one.
_ENCODED_CHARACTER = re.compile(r"%[C-F][0-9A-F](?:%[89AB][0-9A-F])*|%[0-7][0-9A-F]|[^%]")


def serialise(
    headers: Sequence[tuple[str, str]],
    *,
    text: str,
    html: str | None,
    attachments: Sequence[Attachment],
    message_id: str,
) -> bytes:
    """The whole message: the headers as given, then the body."""
    out = [f"{label}: {value}\r\n" for label, value in headers]
    plain = quoted_printable(clean_text(text))
    if attachments:
        mixed = _boundary("mixed", message_id)
        out += [
            "MIME-Version: 1.0\r\n",
            f'Content-Type: multipart/mixed;\r\n boundary="{mixed}"\r\n\r\n',
            f"--{mixed}\r\n",
        ]
        if html is None:
            out += [_TEXT_PART.format("plain"), "\r\n", plain]
        else:
            out += _alternative(plain, html, message_id)
        for attachment in attachments:
            out += [f"\r\n--{mixed}\r\n", *_attachment_part(attachment)]
        out.append(f"\r\n--{mixed}--\r\n")
    elif html is None:
        out += [_TEXT_PART.format("plain"), "MIME-Version: 1.0\r\n\r\n", plain]
    else:
        out += ["MIME-Version: 1.0\r\n", *_alternative(plain, html, message_id)]
    return "".join(out).encode("ascii")


def _boundary(kind: str, message_id: str) -> str:
    digest = hashlib.sha256(message_id.encode("ascii")).hexdigest()[:32]
    # The alternative's boundary is the one written before attachments existed.
    return f"=_outbox_{digest}" if kind == "alternative" else f"=_outbox_{kind}_{digest}"


def _alternative(plain: str, html: str, message_id: str) -> list[str]:
    """A multipart/alternative of the text and the HTML, from its Content-Type header on."""
    boundary = _boundary("alternative", message_id)
    return [
        f'Content-Type: multipart/alternative;\r\n boundary="{boundary}"\r\n\r\n',
        f"--{boundary}\r\n",
        _TEXT_PART.format("plain"),
        "\r\n",
        plain,
        f"\r\n--{boundary}\r\n",
        _TEXT_PART.format("html"),
        "MIME-Version: 1.0\r\n\r\n",
        quoted_printable(clean_text(html)),
        f"\r\n--{boundary}--\r\n",
    ]


def quoted_printable(text: str) -> str:
    """``text`` as UTF-8 in quoted-printable (RFC 2045 §6.7), lines of at most 78, CRLF."""
    lines = text.encode("utf-8").splitlines()
    body = email.quoprimime.body_encode((b"\n".join(lines) + b"\n").decode("latin-1"), FOLD_AT)
    return body.replace("\n", "\r\n")


def _attachment_part(attachment: Attachment) -> list[str]:
    # encodebytes: 76-character lines (RFC 2045 §6.8), each ending in LF; nothing for no bytes.
    lines = base64.encodebytes(attachment.content).decode("ascii").replace("\n", "\r\n")
    return [
        f"Content-Type: {attachment.content_type}\r\n",
        "Content-Transfer-Encoding: base64\r\n",
        f"Content-Disposition: attachment;\r\n{filename_parameter(attachment.filename)}\r\n\r\n",
        lines.removesuffix("\r\n"),
    ]


def filename_parameter(filename: str) -> str:
    """The folded ``filename`` parameter lines of a Content-Disposition (each starts with a space)."""
    if _PLAIN_FILENAME.fullmatch(filename) and len(_FILENAME_LINE) + len(filename) <= FOLD_AT:
        return f' filename="{filename}"'
    encoded = email.utils.encode_rfc2231(filename, "utf-8")  # utf-8''%E2%82%AC.pdf
    if len(encoded) + len(" filename*=") <= FOLD_AT:
        return f" filename*={encoded}"
    chunks = [""]
    for piece in _ENCODED_CHARACTER.findall(encoded):
        if len(chunks[-1]) + len(piece) > _CONTINUATION:
            chunks.append("")
        chunks[-1] += piece
    return ";\r\n".join(f" filename*{index}*={chunk}" for index, chunk in enumerate(chunks))
