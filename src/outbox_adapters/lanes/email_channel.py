"""The e-mail channel (consumer group ``notification-email``, ADR 0021): events become e-mail rows,
one per recipient kind, on the lane ``notification-email``; that lane's ``Worker`` (the one
runtime, :class:`~outbox_adapters.lanes.email.EmailHandler`, :data:`CONSUMER_BACKOFF`) sends them.

The mapping from event type to recipient kinds is data (:data:`EmailRecipes`); the default,
:func:`platform_recipes`, knows ``tenant.provisioned``:

- ``tenant_welcome`` to ``data.admin_email``, with a login link built from the configured public URL;
- ``owner_notify`` to the configured platform-owner address (left out when none is configured).

Every message is built by :func:`~outbox_adapters.lanes.email.email_message`, which re-validates the
recipient (one address, no display name, no control character) and the header values. The event's
free text (names, slugs) is stripped of control characters before it reaches a body or a subject.
An invalid recipient, or an event lacking the recipient's address, is terminal: parked with the
reason, never an SMTP command.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any, Final

import attrs

from outbox_adapters.lanes.email import email_lane, email_message
from outbox_adapters.lanes.row_channel import (
    RECHECK,
    RECHECK_CAP,
    Recipient,
    RecipientRowStore,
    RowChannel,
)
from outbox_adapters.runtime import LaneConfig
from outbox_core.backoff import CONSUMER_BACKOFF
from outbox_core.errors import ConfigurationError, InvalidMessage
from outbox_core.events import EventEnvelope
from outbox_core.mail import clean_line
from outbox_core.ports import Encryptor
from outbox_core.sealing import SealingRules

__all__ = [
    "EMAIL_CHANNEL_GROUP",
    "EMAIL_CHANNEL_LANE",
    "EmailDraft",
    "EmailRecipes",
    "email_channel",
    "email_channel_disabled_warning",
    "email_channel_lane",
    "platform_recipes",
]

_log = logging.getLogger("outbox_adapters.lanes.email_channel")

#: The lane of the channel's per-recipient e-mail rows.
EMAIL_CHANNEL_LANE: Final = "notification-email"
#: The channel's consumer group.
EMAIL_CHANNEL_GROUP: Final = "notification-email"
_MAX_FIELD: Final = 200


@attrs.frozen
class EmailDraft:
    """One recipient's e-mail before it is validated: ``string.Template`` texts and their fields."""

    to: str
    subject: str
    text: str
    fields: Mapping[str, str] = attrs.field(factory=dict)


#: ``recipe(event)``: the draft for one recipient kind; raises ``InvalidMessage`` (or ``KeyError``
#: for a missing field) when the event can't make one.
Recipe = Callable[[EventEnvelope], EmailDraft]
#: Event type → (recipient kind, recipe) pairs.
EmailRecipes = Mapping[str, Sequence[tuple[str, Recipe]]]


def _field(data: Mapping[str, Any], name: str, default: str = "") -> str:
    """A free-text field of the event, as single-line text without control characters."""
    value = data.get(name, default)
    text = value if isinstance(value, str) else str(value)
    return clean_line(text)[:_MAX_FIELD]


def _common(event: EventEnvelope) -> dict[str, str]:
    data = event.data
    return {
        "tenant_id": _field(data, "tenant_id"),
        "tenant_name": _field(data, "tenant_name") or _field(data, "tenant_slug"),
        "tenant_slug": _field(data, "tenant_slug"),
        "admin_display_name": _field(data, "admin_display_name") or "there",
        "signup_source": _field(data, "signup_source") or "unknown",
    }


def _address(data: Mapping[str, Any], name: str) -> str:
    value = data.get(name)
    if not isinstance(value, str) or not value:
        raise InvalidMessage(f"the event has no {name}")
    return value  # validated, unaltered, by email_message


def check_public_url(url: object) -> str:
    """``url`` if it is an http(s) URL without whitespace or control characters."""
    ok = isinstance(url, str) and url.startswith(("https://", "http://")) and url.isprintable()
    if not ok or " " in str(url) or len(str(url)) > _MAX_FIELD:
        raise ConfigurationError(
            "the e-mail channel's public URL (--public-url) must be an http(s) URL without"
            f" spaces, at most {_MAX_FIELD} characters"
        )
    return str(url).rstrip("/")


def platform_recipes(public_url: str, platform_owner: str | None = None) -> EmailRecipes:
    """The platform's recipes: ``tenant.provisioned`` → ``tenant_welcome`` (+ ``owner_notify``)."""
    login_url = f"{check_public_url(public_url)}/login"

    def tenant_welcome(event: EventEnvelope) -> EmailDraft:
        return EmailDraft(
            to=_address(event.data, "admin_email"),
            subject="Welcome to $tenant_name",
            text=(
                "Hello $admin_display_name,\n\n"
                "Your workspace $tenant_name is ready. Sign in here:\n\n"
                "    $login_url\n"
            ),
            fields={**_common(event), "login_url": login_url},
        )

    def owner_notify(event: EventEnvelope) -> EmailDraft:
        return EmailDraft(
            to=str(platform_owner),
            subject="New tenant: $tenant_name",
            text=(
                "A new tenant signed up.\n\n"
                "Name:   $tenant_name\n"
                "Slug:   $tenant_slug\n"
                "Id:     $tenant_id\n"
                "Admin:  $admin_email\n"
                "Source: $signup_source\n"
            ),
            fields={**_common(event), "admin_email": _field(event.data, "admin_email")},
        )

    kinds: list[tuple[str, Recipe]] = [("tenant_welcome", tenant_welcome)]
    if platform_owner:
        kinds.append(("owner_notify", owner_notify))
    else:
        _log.warning("e-mail channel: no platform-owner address configured; owner_notify is off")
    return {"tenant.provisioned": tuple(kinds)}


def email_recipients(
    recipes: EmailRecipes,
    *,
    lane: str = EMAIL_CHANNEL_LANE,
    encryptor: Encryptor | None = None,
    sealing: SealingRules = SealingRules(),  # noqa: B008 - frozen, so one shared default is safe
) -> Callable[[EventEnvelope], list[Recipient]]:
    """The :class:`~outbox_adapters.lanes.row_channel.RowChannel` recipients of ``recipes``: each
    draft built into a validated e-mail message for ``lane``, or refused with the reason. With
    ``encryptor``, the fields ``sealing`` names (the scrubbed ones, e.g. ``setup_url``) are stored
    sealed, as :func:`~outbox_adapters.lanes.email.email_message` seals a host's own e-mail."""

    def recipients(event: EventEnvelope) -> list[Recipient]:
        made = []
        for kind, recipe in recipes.get(event.type, ()):
            try:
                draft = recipe(event)
                message = email_message(
                    to=draft.to,
                    subject=draft.subject,
                    text=draft.text,
                    fields=draft.fields,
                    lane=lane,
                    encryptor=encryptor,
                    sealing=sealing,
                )
            except InvalidMessage as exc:
                made.append(Recipient(kind, refusal=f"undeliverable: {exc}"))
            else:
                made.append(Recipient(kind, message=message))
        return made

    return recipients


def email_channel(  # noqa: PLR0913 - keyword-only knobs, each with a default
    rows: RecipientRowStore,
    recipes: EmailRecipes,
    *,
    name: str = EMAIL_CHANNEL_GROUP,
    recheck: timedelta = RECHECK,
    recheck_cap: timedelta = RECHECK_CAP,
    encryptor: Encryptor | None = None,
    sealing: SealingRules = SealingRules(),  # noqa: B008 - frozen, so one shared default is safe
) -> RowChannel:
    """The e-mail channel over ``rows`` (whose lane the messages are written to); with
    ``encryptor``, its rows' secret fields are sealed (:func:`email_recipients`)."""
    return RowChannel(
        name,
        rows,
        email_recipients(recipes, lane=rows.lane, encryptor=encryptor, sealing=sealing),
        recheck=recheck,
        recheck_cap=recheck_cap,
    )


def email_channel_lane(**settings: Any) -> LaneConfig:  # noqa: ANN401 - LaneConfig's keywords
    """The channel's e-mail lane: lane ``notification-email``, the e-mail timing, and
    :data:`CONSUMER_BACKOFF` (5 attempts, about 2/4/8/16 s apart), unless ``settings`` say otherwise."""
    return email_lane(**{"lane": EMAIL_CHANNEL_LANE, "backoff": CONSUMER_BACKOFF, **settings})


#: Why the e-mail channel is not running.
EMAIL_CHANNEL_DISABLED: Final = (
    "e-mail channel off: SMTP is not configured (set --smtp-url / OUTBOX_SMTP_URL and --sender /"
    " OUTBOX_SENDER); the consumer group notification-email is not started, its events stay on the"
    " broker until it is. The in-app channel is unaffected."
)


def email_channel_disabled_warning() -> str:
    """Log (warning) and return why the e-mail channel is not started."""
    _log.warning(EMAIL_CHANNEL_DISABLED)
    return EMAIL_CHANNEL_DISABLED
