# Copyright 2026 leased-outbox developers. SPDX-License-Identifier: Apache-2.0
"""The typed view of an e-mail row's payload, checked at enqueue and again at send time.

:class:`EmailPayload`'s subject and bodies are ``string.Template`` templates (``$name`` /
``${name}``) filled at *send* time from the row's other string fields: that is why secret links
live in keys of their own (``password_reset_url``) instead of being baked into the body text: the
scrub (:mod:`.scrub`) removes those keys once the row is sent, which it could not do to text inside
a body. Construction renders the templates once, so a placeholder with no field behind it is
refused at enqueue, not at send. Its files (``attachments``, a default scrub key) are decoded and
checked under the rules of :mod:`outbox_core.mail.attachments`, at enqueue and again at send. The
payload as a whole follows the rules of :mod:`outbox_core.payload` (JSON values, sizes).

Error messages name fields, keys and types, never payload values: values may be secrets.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Mapping, Sequence
from html import escape as html_escape
from string import Template
from typing import Any

import attrs

from outbox_core.errors import InvalidPayload
from outbox_core.mail import (
    ATTACHMENTS_KEY,
    MAX_RECIPIENTS,
    Attachment,
    attachments_from_json,
    check_header_value,
    clean_line,
    clean_text,
    validate_address,
)
from outbox_core.payload import RESERVED_KEYS, kind_of

__all__ = ["EmailPayload"]


def _text(_inst: object, attribute: Any, value: Any) -> None:  # noqa: ANN401 - checked here
    if not isinstance(value, str):
        raise InvalidPayload(
            f"payload field {attribute.name!r} must be a string, not {kind_of(value)}"
        )


def _optional_text(inst: object, attribute: Any, value: Any) -> None:  # noqa: ANN401
    if value is not None:
        _text(inst, attribute, value)


def _recipients(value: str | Sequence[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple):
        raise InvalidPayload(
            f"payload field 'to' must be an address or a list, not {kind_of(value)}"
        )
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
            raise InvalidPayload(f"an email payload must be a JSON object, not {kind_of(payload)}")
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
