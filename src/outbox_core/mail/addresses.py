# Copyright 2026 leased-outbox developers. SPDX-License-Identifier: Apache-2.0
"""Recipient addresses (gate 1 of :mod:`outbox_core.mail`): a bare dot-atom addr-spec, normalised.

:func:`validate_address` returns the form (lower-case A-label domain) that is then used, unchanged,
both on the SMTP envelope and in the headers, so the address on the wire is always the validated one.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from itertools import zip_longest
from typing import TYPE_CHECKING

from outbox_core.errors import InvalidRecipient
from outbox_core.mail.headers import UNSAFE, shown

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["MAX_ADDRESS_LENGTH", "MAX_RECIPIENTS", "validate_address"]

#: RFC 5321 §4.5.3.1.3: a path is at most 256 octets including the angle brackets.
MAX_ADDRESS_LENGTH = 254
_MAX_LOCAL = 64  # RFC 5321 §4.5.3.1.1
#: RFC 5321 §4.5.3.1.8: servers must accept at least 100 recipients per message.
MAX_RECIPIENTS = 100

# In a local part, anything that even looks like an RFC 2047 encoded word: '=?' and '?=' are
# atext, so a dot-atom can spell one, and a parser that decodes it in an address header (the
# standard library's does) may read a line break or another address there.
_ENCODED_WORD_SYNTAX = re.compile(r"=\?.*\?=")
# The label separators of IDNA (RFC 3490 §3.1); Python's idna codec splits on each of them.
_IDNA_DOTS = re.compile("[.\u3002\uff0e\uff61]")
# RFC 5322 §3.2.3 atext; a dot-atom is atext runs joined by single dots.
ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
DOT_ATOM = rf"{ATEXT}(?:\.{ATEXT})*"
_DOT_ATOM = re.compile(DOT_ATOM)
# Whitespace as str.isspace() reads it (re's \s on str patterns is the same Unicode predicate).
_SPACE = re.compile(r"\s")
# RFC 1035 §2.3.1 / RFC 5890 LDH label (already lower-cased).
_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")


def _refuse(raw: object, why: str) -> InvalidRecipient:
    return InvalidRecipient(f"{shown(raw)} is not an acceptable recipient address: {why}")


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
    return _validated(raw)


@functools.lru_cache(maxsize=4096)
def _validated(raw: str) -> str:
    """:func:`validate_address` of a string. Kept for the most recent addresses: a message's
    addresses are checked by the builder and again by the message it returns, and a lane sends
    from one sender (a refusal is an exception, which the cache does not keep)."""
    # Before anything else, so a huge value costs nothing more than its length.
    if len(raw) > MAX_ADDRESS_LENGTH:
        raise _refuse(raw, f"it is {len(raw)} characters long; the limit is 254 (RFC 5321)")
    bad = UNSAFE.search(raw)
    if bad:
        raise _refuse(raw, f"it contains the control character U+{ord(bad.group()):04X}")
    if _SPACE.search(raw):
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
                f"its domain label {shown(label)} is not a host-name label (RFC 1035): 1-63 letters,"
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


def recipient_list(to: Sequence[str]) -> tuple[str, ...]:
    """``to`` (one address or a sequence) validated and normalised, in order, without repeats."""
    addresses = (to,) if isinstance(to, str) else tuple(to)
    if not addresses:
        raise InvalidRecipient("a message needs at least one recipient; 'to' is empty")
    if len(addresses) > MAX_RECIPIENTS:
        raise InvalidRecipient(
            f"a message has {len(addresses)} recipients; the limit is {MAX_RECIPIENTS}"
            " (RFC 5321 §4.5.3.1.8)"
        )
    return tuple(dict.fromkeys(validate_address(address) for address in addresses))
