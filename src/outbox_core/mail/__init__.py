# Copyright 2026 leased-outbox developers. SPDX-License-Identifier: Apache-2.0
"""Mail safety: recipient validation, control-character cleaning, injection-proof messages.

Theory of operation
-------------------
Every value that reaches a message passes three gates, each meant to stop the hostile inputs of
docs/reliability.md ("Hostile input") on its own; together they are defence in depth:

1. **Values in.** :func:`validate_address` (:mod:`.addresses`) accepts only a bare dot-atom
   addr-spec and returns the normalised form (lower-case A-label domain) that is then used,
   unchanged, both on the SMTP envelope and in the headers. :func:`check_header_value`
   (:mod:`.headers`) strips control characters from single-line fields and refuses RFC 2047
   encoded words and over-long values; :func:`clean_text` does the same job for bodies.
   :class:`Attachment` (:mod:`.attachments`) holds a file's name to a header value's rules and
   more, its content type to a bare ``type/subtype``, and its size to fixed limits.
2. **Serialise.** The library writes every header itself, by rules simple enough to check by
   eye (:mod:`.headers`): printable ASCII that fits a 78-character line goes as itself (a display
   name as a quoted-string), anything else as base64 RFC 2047 encoded words, one per folded line;
   the addresses are the validated ones, verbatim. The MIME body (:mod:`.mime`) is quoted-printable
   text, in the layout the ``email`` package itself gives it, plus one base64 part per attachment
   in a multipart/mixed, so the output is 7-bit and no body line can equal a boundary (each
   contains ``=_``, a pair neither encoding writes). The ``email`` package is not trusted with
   header text: on CPython 3.11.7 it decodes an encoded word in a value it is given and writes a
   decoded newline back raw (a new header), drops the quotes of a long quoted display name (its
   ``"`` and ``<`` become syntax), and can lose the spaces of a long subject.
3. **Verify out.** :func:`build_message` (:mod:`.message`) re-parses the exact bytes it produced
   (:mod:`.verify`) and refuses them (:class:`~outbox_core.errors.UnsafeHeader`) unless they are
   7-bit, CRLF-framed, no line is over 998 octets, and the headers, addresses, subject, date, MIME
   structure and attachments (filename, content type and bytes of each) are exactly the intended
   ones. A bug or an interpreter change in gate 2 therefore stops the message instead of sending it.

The core never reads the clock or randomness: ``date`` and ``message_id`` are arguments, and the
MIME boundaries are derived from the message id, so the same arguments give the same bytes.
"""

from __future__ import annotations

from outbox_core.mail.addresses import MAX_ADDRESS_LENGTH, MAX_RECIPIENTS, validate_address
from outbox_core.mail.attachments import (
    ATTACHMENTS_KEY,
    MAX_ATTACHMENT_BYTES,
    MAX_ATTACHMENTS,
    MAX_ATTACHMENTS_BYTES,
    MAX_FILENAME_OCTETS,
    Attachment,
    attachments_from_json,
    attachments_to_json,
    check_attachments,
)
from outbox_core.mail.headers import MAX_HEADER_LENGTH, check_header_value, clean_line, clean_text
from outbox_core.mail.message import OutgoingMail, build_message

__all__ = [
    "ATTACHMENTS_KEY",
    "MAX_ADDRESS_LENGTH",
    "MAX_ATTACHMENTS",
    "MAX_ATTACHMENTS_BYTES",
    "MAX_ATTACHMENT_BYTES",
    "MAX_FILENAME_OCTETS",
    "MAX_HEADER_LENGTH",
    "MAX_RECIPIENTS",
    "Attachment",
    "OutgoingMail",
    "attachments_from_json",
    "attachments_to_json",
    "build_message",
    "check_attachments",
    "check_header_value",
    "clean_line",
    "clean_text",
    "validate_address",
]
