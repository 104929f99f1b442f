# Copyright 2026 leased-outbox developers. SPDX-License-Identifier: Apache-2.0
"""Payload rules: what a row may carry, checked at enqueue and again at send time.

Theory of operation
-------------------
A hostile payload (not JSON, not an object, huge, missing required fields; docs/reliability.md,
"Hostile input") gets a clear error at enqueue, where the caller can still catch it, and a row
that cannot be decoded fails permanently at send time (never days of retries).

* :func:`validate_payload` (enqueue) accepts a ``dict`` of JSON values only: ``dict`` with string
  keys, ``list``, ``str``, ``int``, ``float``, ``bool`` and ``None``. Tuples, sets, bytes, dates
  and the like are refused rather than silently converted (a tuple would come back as a list).
  NaN and infinities are refused (not JSON), and so are U+0000 and lone surrogates in strings
  and keys (PostgreSQL ``jsonb`` cannot store them, and it is better to hear it at enqueue than
  as a database error). The canonical encoding (compact, UTF-8, keys in the given order) must fit
  ``max_bytes``. The caller gets back a deep copy decoded from that encoding, so mutating the
  original afterwards cannot change what is stored.
* :func:`decode_payload` (send) turns a stored row back into a dict under the same rules, and
  raises :class:`InvalidPayload` for anything else: the row fails at once.
* :class:`EmailPayload` is the typed view of an email row. Its subject and bodies are
  ``string.Template`` templates (``$name`` / ``${name}``) filled at *send* time from the row's
  other string fields: that is why secret links live in keys of their own (``password_reset_url``)
  instead of being baked into the body text: the scrub (:mod:`.scrub`) removes those keys once the
  row is sent, which it could not do to text inside a body. Construction renders the templates
  once, so a placeholder with no field behind it is refused at enqueue, not at send. Its files
  (``attachments``, a default scrub key) are decoded and checked under the rules of
  :mod:`outbox_core.mail.attachments`, at enqueue and again at send.
* Sizes: an e-mail without its attachments must fit :data:`MAX_MESSAGE_BYTES` (256 KiB, checked
  by the e-mail enqueue helper); :data:`DEFAULT_MAX_BYTES`, the stores' limit for a whole payload,
  adds room for the largest attachments a message may carry, as base64 and then sealed.

Error messages name paths, keys and types, never payload values: values may be secrets.
"""

from __future__ import annotations

import json
import math
import re
import types
from collections.abc import Callable, Mapping, Sequence
from html import escape as html_escape
from string import Template
from typing import Any

import attrs

from outbox_core.errors import ConfigurationError, InvalidPayload
from outbox_core.mail import (
    ATTACHMENTS_KEY,
    MAX_ATTACHMENTS,
    MAX_ATTACHMENTS_BYTES,
    MAX_RECIPIENTS,
    Attachment,
    attachments_from_json,
    check_header_value,
    clean_line,
    clean_text,
    validate_address,
)
from outbox_core.recipients import DELIVERED_KEY
from outbox_core.sealing import TAG_BYTES

__all__ = [
    "DEFAULT_MAX_BYTES",
    "MAX_DEPTH",
    "MAX_MESSAGE_BYTES",
    "RESERVED_KEYS",
    "EmailPayload",
    "decode_payload",
    "validate_payload",
]

#: The size limit of an e-mail payload without its attachments (canonical JSON, bytes): the
#: message itself (recipients, subject, bodies, template fields).
MAX_MESSAGE_BYTES = 256 * 1024


def _attachment_room() -> int:
    """The most bytes the largest attachment list a message may carry takes in a stored payload."""
    # As JSON: base64 of each file (4 characters per 3 bytes, rounded up per file, so at most
    # 4/3 of (bytes + 2) each) and each file's object around it: at most 1 KiB (47 characters
    # of keys and punctuation, a content type of at most 255, a filename of at most 255 octets,
    # twice that if every one is a quote escaped as \").
    files = 4 * (MAX_ATTACHMENTS_BYTES + 2 * MAX_ATTACHMENTS) // 3 + 1024 * MAX_ATTACHMENTS
    # Sealed (ADR 0010), that JSON is encrypted (+ the tag) and base64-encoded again, inside
    # an envelope of a few dozen characters (256 allowed, the key and its quotes included).
    return 4 * -(-(files + TAG_BYTES) // 3) + 256


#: The default size limit of a payload's canonical JSON encoding, in bytes: the message
#: (:data:`MAX_MESSAGE_BYTES`) plus room for the most attachments a message may carry, sealed
#: (7 MB of files: 9.4 MB as base64, 12.5 MB sealed; 12,734,244 bytes in all).
DEFAULT_MAX_BYTES = MAX_MESSAGE_BYTES + _attachment_room()
#: At most this many containers deep, the payload itself included (a dict that contains itself
#: hits this limit too).
MAX_DEPTH = 64
#: The keys of an email payload that are not template fields.
RESERVED_KEYS = frozenset(
    {
        "to",
        "subject",
        "text",
        "html",
        "reply_to",
        "sender_name",
        ATTACHMENTS_KEY,
        # Written by the worker's marks only: who already has the message (outbox_core.recipients).
        DELIVERED_KEY,
    }
)

# U+0000 and lone surrogates: PostgreSQL jsonb refuses both.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_JSON_SCALARS = (str, int, float, type(None))  # bool is an int


def _path(path: tuple[str | int, ...]) -> str:
    shown = "payload" + "".join(f"[{step!r}]" for step in path)
    return shown if len(shown) <= 120 else shown[:117] + "..."


# --------------------------------------------------------------------------- JSON objects


def validate_payload(obj: object, *, max_bytes: int = DEFAULT_MAX_BYTES) -> dict[str, Any]:
    """Return a deep copy of ``obj`` decoded from its canonical JSON, or raise InvalidPayload."""
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
        raise ConfigurationError(f"max_bytes must be a positive number of bytes, got {max_bytes!r}")
    return _canonical(obj, max_bytes)


def decode_payload(raw: str | bytes | Mapping[str, Any]) -> dict[str, Any]:
    """Decode a stored payload (JSON text, UTF-8 bytes or an already decoded mapping).

    Raises :class:`InvalidPayload` for anything that is not a JSON object under the rules of
    :func:`validate_payload` (no size limit here: the row is already stored).
    """
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidPayload(f"the stored payload is not UTF-8 ({exc.reason})") from exc
    if isinstance(raw, Mapping):
        return _canonical(dict(raw), None)
    if not isinstance(raw, str):
        raise InvalidPayload(f"a stored payload is JSON text or a mapping, not {_kind(raw)}")
    obj, may_hide = _loads(raw)
    if not isinstance(obj, dict):
        raise InvalidPayload(f"the stored payload is a JSON {_json_kind(obj)}, not a JSON object")
    # Freshly parsed, so JSON types only and a copy of its own: what is left to check is what
    # json.loads lets through (depth, 1e999 read as infinity, U+0000, lone surrogates). The
    # text says when none of them can be there, and then the walk is skipped.
    if may_hide:
        _check_tree(obj)
    return obj


def _loads(raw: str) -> tuple[object, bool]:
    """The decoded text, and whether it may hide what :func:`_check_tree` refuses."""
    # PostgreSQL stores what Python can't read back: nesting past the recursion limit, integers
    # longer than sys.get_int_max_str_digits(). Each is this row's problem, said without its values.
    try:
        try:
            return _FINITE_DECODER.decode(raw), _may_hide(raw)
        except _NotFinite:  # a number too big for a float: the walk names where it is
            return _DECODER.decode(raw), True
    except json.JSONDecodeError as exc:
        raise InvalidPayload(f"the stored payload is not valid JSON ({exc})") from exc
    except RecursionError as exc:
        raise InvalidPayload(
            f"the stored payload nests too deep to decode (a payload may nest {MAX_DEPTH} levels)"
        ) from exc
    except ValueError as exc:  # NaN/Infinity, an integer with too many digits
        raise InvalidPayload(f"the stored payload cannot be decoded ({exc})") from exc


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


class _NotFinite(Exception):
    """A JSON number that reads as an infinite float (``1e999``)."""


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotFinite
    return value


# One decoder each (json.loads with a hook would build a new one per call).
_DECODER = json.JSONDecoder(parse_constant=_no_constant)
_FINITE_DECODER = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite_float)


def _may_hide(raw: str) -> bool:
    """Whether the decoded value of ``raw`` may nest too deep or hold an unstorable character.

    It cannot when the text has at most MAX_DEPTH brackets (each container opens one), no
    ``\\u`` escape (the only way to write U+0000 or a lone surrogate in valid JSON other than
    as itself) and neither of them as itself.
    """
    brackets = raw.count("[") + raw.count("{")
    return brackets > MAX_DEPTH or "\\u" in raw or _UNSTORABLE.search(raw) is not None


def _kind(value: object) -> str:
    return type(value).__name__


# What json.loads returns, by the JSON name of the value it read (bool before int: it is one).
_JSON_KINDS = ((bool, "boolean"), (str, "string"), (int | float, "number"), (list, "array"))


def _json_kind(value: object) -> str:
    return next((name for kind, name in _JSON_KINDS if isinstance(value, kind)), "null")


def _canonical(obj: object, max_bytes: int | None) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise InvalidPayload(f"a payload must be a JSON object (a dict), not {_kind(obj)}")
    _check_tree(obj)
    try:
        text = json.dumps(obj, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    except ValueError as exc:  # an int too long to write out (sys.get_int_max_str_digits)
        raise InvalidPayload(f"the payload cannot be written as JSON ({exc})") from exc
    size = len(text.encode("utf-8"))
    if max_bytes is not None and size > max_bytes:
        raise InvalidPayload(
            f"the payload is {size:,} bytes as JSON; the limit is {max_bytes:,} bytes"
        )
    result: dict[str, Any] = json.loads(text)
    return result


def _check_tree(root: dict[Any, Any]) -> None:
    """Refuse anything json.dumps would reject, coerce (tuples, int keys) or PostgreSQL can't store."""
    stack: list[tuple[object, tuple[str | int, ...]]] = [(root, ())]
    while stack:
        value, path = stack.pop()
        if isinstance(value, str):
            _check_string(value, path)
        elif isinstance(value, float) and not math.isfinite(value):
            raise InvalidPayload(f"{_path(path)} is {value}, which JSON cannot represent")
        elif isinstance(value, _JSON_SCALARS):
            continue
        elif len(path) >= MAX_DEPTH:
            raise InvalidPayload(
                f"{_path(path)} nests deeper than {MAX_DEPTH} levels (or contains itself)"
            )
        elif isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise InvalidPayload(
                        f"{_path(path)} has a {_kind(key)} key; JSON keys are strings"
                    )
                _check_string(key, path, key_of=True)
                stack.append((item, (*path, key)))
        elif isinstance(value, list):
            stack.extend((item, (*path, index)) for index, item in enumerate(value))
        else:
            raise InvalidPayload(
                f"{_path(path)} is a {_kind(value)}; a payload holds only dict, list, str, int,"
                " float, bool and None"
            )


def _check_string(value: str, path: tuple[str | int, ...], *, key_of: bool = False) -> None:
    bad = _UNSTORABLE.search(value)
    if bad:
        # The path is written out only here: building it for every string costs more than the
        # search itself.
        where = f"a key of {_path(path)}" if key_of else _path(path)
        raise InvalidPayload(
            f"{where} contains U+{ord(bad.group()):04X}, which PostgreSQL jsonb cannot store"
        )


# --------------------------------------------------------------------------- email payloads


def _text(_inst: object, attribute: Any, value: Any) -> None:  # noqa: ANN401 - checked here
    if not isinstance(value, str):
        raise InvalidPayload(
            f"payload field {attribute.name!r} must be a string, not {_kind(value)}"
        )


def _optional_text(inst: object, attribute: Any, value: Any) -> None:  # noqa: ANN401
    if value is not None:
        _text(inst, attribute, value)


def _recipients(value: str | Sequence[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple):
        raise InvalidPayload(f"payload field 'to' must be an address or a list, not {_kind(value)}")
    if not value:
        raise InvalidPayload("payload field 'to' names no recipient")
    recipients = tuple(dict.fromkeys(validate_address(address) for address in value))
    if len(recipients) > MAX_RECIPIENTS:
        # build_message refuses more at send time: refuse them here, where the caller can catch it.
        raise InvalidPayload(
            f"payload field 'to' names {len(recipients)} recipients; the limit is"
            f" {MAX_RECIPIENTS} (RFC 5321 §4.5.3.1.8)"
        )
    return recipients


def _optional_address(value: str | None) -> str | None:
    return None if value is None else validate_address(value)


def _fields(value: Mapping[str, str]) -> Mapping[str, str]:
    for key, item in value.items():
        if key in RESERVED_KEYS or not isinstance(key, str) or not isinstance(item, str):
            raise InvalidPayload(
                f"template field {key!r} must be a non-reserved string key with a string value"
            )
    return types.MappingProxyType(dict(value))


@attrs.frozen
class EmailPayload:
    """The typed view of an email row's payload. Build it with :meth:`from_payload`."""

    #: The recipients, validated and normalised (the payload may give one address or a list).
    to: tuple[str, ...] = attrs.field(converter=_recipients)
    #: The subject template.
    subject: str = attrs.field(validator=_text)
    #: The plain-text body template.
    text: str = attrs.field(validator=_text)
    #: The HTML body template; field values are HTML-escaped when they are substituted.
    html: str | None = attrs.field(default=None, validator=_optional_text)
    #: A Reply-To address, validated and normalised.
    reply_to: str | None = attrs.field(default=None, converter=_optional_address)
    #: The sender's display name.
    sender_name: str | None = attrs.field(default=None, validator=_optional_text)
    #: Every other top-level string field of the payload: the values templates may use.
    fields: Mapping[str, str] = attrs.field(factory=dict, converter=_fields, hash=False)
    #: The files to attach, decoded and checked (``attachments`` in the payload).
    attachments: tuple[Attachment, ...] = attrs.field(default=(), repr=False)

    def __attrs_post_init__(self) -> None:
        # Render once now, so that enqueue refuses what send would refuse.
        subject, _, _ = self.render()
        check_header_value(subject, field="subject")
        if self.sender_name is not None:
            check_header_value(self.sender_name, field="sender_name")

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> EmailPayload:
        """Read an email payload; raises InvalidPayload / InvalidRecipient / UnsafeHeader."""
        if not isinstance(payload, Mapping):
            raise InvalidPayload(f"an email payload must be a JSON object, not {_kind(payload)}")
        missing = [key for key in ("to", "subject", "text") if key not in payload]
        if missing:
            raise InvalidPayload(f"the email payload has no {', '.join(map(repr, missing))} field")
        return cls(
            to=payload["to"],
            subject=payload["subject"],
            text=payload["text"],
            html=payload.get("html"),
            reply_to=payload.get("reply_to"),
            sender_name=payload.get("sender_name"),
            attachments=(
                attachments_from_json(payload[ATTACHMENTS_KEY])
                if ATTACHMENTS_KEY in payload
                else ()
            ),
            fields={
                key: value
                for key, value in payload.items()
                if key not in RESERVED_KEYS and isinstance(key, str) and isinstance(value, str)
            },
        )

    def render(self) -> tuple[str, str, str | None]:
        """Fill the templates: ``(subject, text, html)``, each cleaned for where it goes.

        Substituted values are cleaned first (single-line for the subject, body rules for the
        bodies, and HTML-escaped for the HTML body), and the results are cleaned again whole.
        """
        subject = clean_line(_fill("subject", self.subject, self.fields, clean_line))
        text = clean_text(_fill("text", self.text, self.fields, clean_text))
        html = None
        if self.html is not None:
            html = clean_text(_fill("html", self.html, self.fields, _html_value))
        return subject, text, html


def _html_value(value: str) -> str:
    return html_escape(clean_text(value), quote=True)


def _fill(name: str, source: str, fields: Mapping[str, str], clean: Callable[[str], str]) -> str:
    template = Template(source)
    if not template.is_valid():
        raise InvalidPayload(
            f"payload field {name!r} has a '$' that starts no placeholder; write '$$' for a"
            " literal dollar sign, '$name' or '${name}' for a field"
        )
    wanted = template.get_identifiers()
    missing = sorted(set(wanted) - fields.keys())
    if missing:
        raise InvalidPayload(
            f"payload field {name!r} uses {', '.join('$' + key for key in missing)}, but the"
            " payload has no such string field (reserved keys and non-string values can't be"
            " used in templates)"
        )
    return template.substitute({key: clean(fields[key]) for key in wanted})
