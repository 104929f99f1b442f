r"""The one redaction of the library: what every place that shows a setting or a message masks.

``outbox config show`` (text and ``--json``), the CLI's error lines and both log formatters (text
and JSON, :mod:`outbox_adapters.telemetry.logs`) call these functions and nothing else, so a form
masked in one is masked in all. The rules are pure text rules (``re`` only, no I/O), which is why
they live in the core: every adapter layer may import them, and none keeps a copy of its own.

======================================================  ============================================
what the text holds                                      shown as
======================================================  ============================================
URL userinfo, any scheme (``postgresql``, ``amqp``,      ``smtp://user:***@host``, ``redis://:***@h``
``nats``, ``kafkas``, ``redis``, ``smtp`` ...), an
empty user, several hosts, percent-escapes
a query parameter named like a secret (``?password=``,   ``?sslpassword=***&sslmode=require``
``&sslpassword=``, ``&token=``, ``&api_key=``)
a libpq ``key=value`` pair, unquoted (backslash         ``password=***`` (``'***'`` if quoted)
escapes) or quoted (``password='a b\' c'``), blanks
around ``=`` allowed; ``"password": "x"`` and
``password: x`` alike
an ``Authorization`` credential                          ``Bearer ***``, ``Basic ***``
a webhook signing secret or private key (``whsec_...``,  ``whsec_***``, ``whsk_***``
``whsk_...``)
======================================================  ============================================

A secret's name (:func:`is_secret_name`) ends in ``password``, ``passwd``, ``pwd``, ``secret``,
``token``, ``credential(s)`` or an api/access/secret/private/encryption/signing/client/sasl
key(s), with any prefix: ``sslpassword``, ``sasl_password``, ``client_secret``,
``OUTBOX_ENCRYPTION_KEYS``. A user name alone (``nats://user@host``) is kept.

Settings and mappings (:func:`redact_setting`, :func:`redact_value`): a value named like a secret
is masked whole (the ``--encryption-keys`` list among them); a payload's (:func:`is_payload_name`:
``--field``, ``--data``, a message's text) keeps only the keys of its ``KEY=VALUE`` items; any other
value goes through :func:`redact_text`, lists and mappings item by item. Payload keys at rest are
another matter: :mod:`outbox_core.scrub`.

The rules err towards masking: a URL's password runs to the authority's last ``@`` (libpq stops at
the first, Python's parsers at the last), and an unquoted pair's value to the next blank, as libpq
reads it, so ``password=x&user=y`` outside a query string is shown as ``password=***``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

__all__ = [
    "MASK",
    "is_payload_name",
    "is_secret_name",
    "redact_setting",
    "redact_text",
    "redact_value",
]

#: What a secret is shown as.
MASK: Final = "***"

_NAME: Final = (
    r"[A-Za-z0-9_.-]*?(?:password|passwd|pwd|secret|token|credentials?"
    r"|(?:api|access|secret|private|encryption|signing|client|sasl)[_-]?keys?)"
)
_SECRET_NAME: Final = re.compile(_NAME, re.IGNORECASE)
_PAYLOAD_NAME: Final = re.compile(
    r"(?:[A-Za-z0-9_.-]*[_.-])?(?:data|fields?|payload|text|html|subject)", re.IGNORECASE
)
#: ``scheme://user:password@`` up to the authority's last ``@`` (the user may be empty).
_USERINFO: Final = re.compile(
    r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^\s/?#:]*:)[^\s/?#]*(?=@)", re.IGNORECASE
)
#: A query parameter: its value ends at ``&``, ``#`` or a blank (a URL escapes the others).
_QUERY: Final = re.compile(rf"(?P<head>[?&;]{_NAME}=)[^&#\s]*", re.IGNORECASE)
#: A ``name=value`` or ``name: value`` pair: a quoted value to its closing quote (backslash
#: escapes inside), an unquoted one to the next unescaped blank, as libpq reads them.
_PAIR: Final = re.compile(
    rf"""(?<![\w.?&;-])(?P<head>{_NAME}["']?\s*[=:]\s*)
    (?P<value>'(?:[^'\\]|\\.)*'?|"(?:[^"\\]|\\.)*"?|(?:\\.|[^\s\\])+|\\)""",
    re.IGNORECASE | re.VERBOSE,
)
_AUTHORIZATION: Final = re.compile(
    r"(?P<head>\b(?:bearer|basic)\s+)[A-Za-z0-9._~+/=-]{6,}", re.IGNORECASE
)
_WEBHOOK_SECRET: Final = re.compile(r"\b(?P<head>whsec_|whsk_)[A-Za-z0-9+/=_-]+")
#: A payload item's key (``KEY=VALUE``), kept while its value is masked.
_PAYLOAD_KEY: Final = re.compile(r"[\w.-]+=")


def is_secret_name(name: str) -> bool:
    """Whether a setting, parameter or payload key named ``name`` holds a secret (see above)."""
    return _SECRET_NAME.fullmatch(name) is not None


def is_payload_name(name: str) -> bool:
    """Whether a setting or key named ``name`` carries payload values (``fields``, ``data``,
    ``payload``, a message's ``text``, ``html`` or ``subject``, with any prefix)."""
    return _PAYLOAD_NAME.fullmatch(name) is not None


def redact_text(text: str) -> str:
    """``text`` with every secret form of the module's table masked."""
    text = _USERINFO.sub(rf"\g<head>{MASK}", text)
    text = _QUERY.sub(rf"\g<head>{MASK}", text)
    text = _PAIR.sub(_pair, text)
    text = _AUTHORIZATION.sub(rf"\g<head>{MASK}", text)
    return _WEBHOOK_SECRET.sub(rf"\g<head>{MASK}", text)


def _pair(found: re.Match[str]) -> str:
    """A pair's name and the mask, in the value's quotes when it was quoted."""
    quote = found["value"][0]
    return found["head"] + (f"{quote}{MASK}{quote}" if quote in "'\"" else MASK)


def redact_value(value: object) -> object:
    """``value`` with its text redacted: strings, list and tuple items, mapping values (a key
    named like a secret masks its value whole, a payload key keeps only its items' keys);
    numbers, booleans and ``None`` as they are."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, list | tuple):
        return [redact_value(item) for item in value]
    if isinstance(value, Mapping):
        return {str(key): redact_setting(str(key), item) for key, item in value.items()}
    if value is None or isinstance(value, bool | int | float):
        return value
    return redact_text(str(value))


def _payload(value: object) -> object:
    if isinstance(value, list | tuple):
        return [_payload(item) for item in value]
    found = _PAYLOAD_KEY.match(str(value))
    return MASK if found is None else found.group() + MASK


def redact_setting(name: str, value: object) -> object:
    """A setting's value as it may be shown: masked whole when ``name`` is a secret's, only the
    keys of its ``KEY=VALUE`` items kept when ``name`` is a payload's, else
    :func:`redact_value`. ``None`` and an empty value stay as they are (nothing is set)."""
    if value is None or value in ((), [], ""):
        return value
    if is_secret_name(name):
        return MASK
    if is_payload_name(name):
        return _payload(value)
    return redact_value(value)
