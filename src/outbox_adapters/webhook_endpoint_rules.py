"""The endpoint side's input rules, one function each: what a webhook endpoint's URL, owner,
description and rate cap may be, and what disabling it or rotating its secret takes. Standard
library and the core only; :mod:`outbox_adapters.webhook_model` re-exports them."""

from __future__ import annotations

from datetime import timedelta
from typing import Final

from outbox_core.errors import ConfigurationError, InvalidMessage

__all__ = [
    "MAX_DESCRIPTION",
    "check_description",
    "check_endpoint_url",
    "check_max_per_second",
    "check_overlap",
    "check_owner",
    "check_reason",
    "check_window",
]

_MAX_URL: Final = 2048
#: The longest endpoint description (what the host or its customer calls the endpoint).
MAX_DESCRIPTION: Final = 500


def check_endpoint_url(url: object) -> str:
    """The shape rule every stored URL meets (text, no whitespace or control character, at most
    2,048 characters). Whether its destination is allowed is the destination guard's call, made
    by whoever registers it (``outbox endpoints add``) and again at every connect."""
    if (
        not isinstance(url, str)
        or not url
        or len(url) > _MAX_URL
        or not url.isprintable()
        or any(c.isspace() for c in url)
    ):
        raise InvalidMessage(
            f"an endpoint URL is 1 to {_MAX_URL} printable characters without spaces, got {url!r:.80}"
        )
    return url


def check_owner(owner_email: str | None) -> str | None:
    """The owner's address (told when the endpoint is disabled), or ``None``."""
    if owner_email is None:
        return None
    local, at, domain = owner_email.rpartition("@")
    if (
        not at
        or not local
        or "." not in domain
        or not owner_email.isprintable()
        or " " in owner_email
    ):
        raise InvalidMessage(f"the owner e-mail address {owner_email!r:.80} is not an address")
    return owner_email


def check_max_per_second(value: object) -> int | None:
    """An endpoint's rate cap: ``None`` (no cap) or a whole number of deliveries a second, at
    least 1; else :class:`InvalidMessage` naming the rule."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        return value
    raise InvalidMessage(
        f"an endpoint's max_per_second is None (no cap) or a whole number of at least 1, got"
        f" {value!r:.80}"
    )


def check_reason(reason: object) -> str:
    """Why an operator disables an endpoint: some text."""
    if not isinstance(reason, str) or not reason.strip():
        raise InvalidMessage("disabling an endpoint needs a reason")
    return reason


def check_overlap(overlap: object) -> timedelta:
    """How long a rotated-out secret keeps signing: a timedelta >= 0."""
    if not isinstance(overlap, timedelta) or overlap < timedelta(0):
        raise ConfigurationError(f"a secret overlap is a timedelta >= 0, got {overlap!r:.80}")
    return overlap


def check_window(window: object) -> timedelta:
    """The endpoint health window: a positive timedelta."""
    if not isinstance(window, timedelta) or window <= timedelta(0):
        raise ConfigurationError(f"a health window is a positive timedelta, got {window!r:.80}")
    return window


def check_description(value: object) -> str | None:
    """``None`` or a description of 1 to 500 printable characters (no control characters)."""
    if value is None:
        return None
    if (
        not isinstance(value, str)
        or not value.strip()
        or len(value) > MAX_DESCRIPTION
        or not value.isprintable()
    ):
        raise InvalidMessage(
            f"an endpoint description is None or 1 to {MAX_DESCRIPTION} printable characters,"
            f" got {value!r:.80}"
        )
    return value
