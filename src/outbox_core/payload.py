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
* The typed view of an e-mail row (its templates and fields) is
  :class:`outbox_core.email_payload.EmailPayload`, built on these rules.
* Sizes: an e-mail without its attachments must fit :data:`MAX_MESSAGE_BYTES` (256 KiB, checked
  by the e-mail enqueue helper); :data:`DEFAULT_MAX_BYTES`, the stores' limit for a whole payload,
  adds room for the largest attachments a message may carry, as base64 and then sealed.

Error messages name paths, keys and types, never payload values: values may be secrets.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from outbox_core.errors import ConfigurationError, InvalidPayload
from outbox_core.mail import (
    ATTACHMENTS_KEY,
    MAX_ATTACHMENTS,
    MAX_ATTACHMENTS_BYTES,
)
from outbox_core.recipients import DELIVERED_KEY
from outbox_core.sealing import TAG_BYTES

__all__ = [
    "DEFAULT_MAX_BYTES",
    "MAX_DEPTH",
    "MAX_MESSAGE_BYTES",
    "RESERVED_KEYS",
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
        raise InvalidPayload(f"a stored payload is JSON text or a mapping, not {kind_of(raw)}")
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


def kind_of(value: object) -> str:
    """The Python type name of ``value`` (what an error says a value is, never the value)."""
    return type(value).__name__


# What json.loads returns, by the JSON name of the value it read (bool before int: it is one).
_JSON_KINDS = ((bool, "boolean"), (str, "string"), (int | float, "number"), (list, "array"))


def _json_kind(value: object) -> str:
    return next((name for kind, name in _JSON_KINDS if isinstance(value, kind)), "null")


def _canonical(obj: object, max_bytes: int | None) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise InvalidPayload(f"a payload must be a JSON object (a dict), not {kind_of(obj)}")
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
                        f"{_path(path)} has a {kind_of(key)} key; JSON keys are strings"
                    )
                _check_string(key, path, key_of=True)
                stack.append((item, (*path, key)))
        elif isinstance(value, list):
            stack.extend((item, (*path, index)) for index, item in enumerate(value))
        else:
            raise InvalidPayload(
                f"{_path(path)} is a {kind_of(value)}; a payload holds only dict, list, str, int,"
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
