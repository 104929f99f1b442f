# Copyright 2026 leased-outbox developers. SPDX-License-Identifier: Apache-2.0
"""Scrub rules: which payload keys carry secrets, and how they leave a row.

Theory of operation
-------------------
A row's payload may carry secrets the message needs while it is unsent: one-time links
(``setup_url``, ``password_reset_url``, ...), a public token, attached files (an invoice PDF). Sent rows are kept
indefinitely (they are the delivery record), so the mark that makes a row ``dispatched`` or
``skipped`` removes those keys *in the same UPDATE* (ADR 0006, "Marks": the scrub is part of the
fenced mark, so no sent row holds them). Every other key stays, with the
same value, so whatever reads the delivery record afterwards reads what it read before.

A ``failed`` row keeps its whole payload, so an operator's requeue sends a complete message; a
scrubbed row cannot be requeued (:func:`outbox_core.delivery.check_requeue` says why).

Only *top-level* keys are scrubbed, as the record's SQL does (``payload - keys`` in PostgreSQL):
a nested key of the same name is data the host chose to nest, not one of the lane's secret fields.

:meth:`ScrubRules.scrub` is the pure reference of what a store's dispatched/skipped UPDATE must do
to a payload; :meth:`ScrubRules.redact` is for logs, which must never show a secret, not even while
the row is pending.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import attrs

from outbox_core._validators import key_names

if TYPE_CHECKING:
    from outbox_core.messages import JSONObject

__all__ = ["DEFAULT_SECRET_KEYS", "REDACTED", "ScrubRules"]

#: The secret-bearing keys of the design record's email payloads (``scrubbedPayloadKeys``), and
#: ``attachments``, where an e-mail carries its files (:mod:`outbox_core.mail.attachments`; the
#: record's ``pdf`` key held the invoice PDF the same way, and stays for payloads that use it).
DEFAULT_SECRET_KEYS: Final = frozenset(
    {
        "setup_url",
        "update_url",
        "password_reset_url",
        "invite_url",
        "public_token",
        "pdf",
        "attachments",
    }
)

#: What :meth:`ScrubRules.redact` shows in place of a secret value.
REDACTED: Final = "[scrubbed]"


@attrs.frozen
class ScrubRules:
    """The secret-bearing payload keys of one lane, and what scrubbing them means."""

    #: Top-level payload keys removed when a row is marked dispatched or skipped. Empty: none.
    keys: frozenset[str] = attrs.field(
        default=DEFAULT_SECRET_KEYS, validator=key_names("ScrubRules.")
    )

    def scrub(self, payload: JSONObject) -> dict[str, Any]:
        """A copy of ``payload`` without the secret keys; every other key keeps its value object
        and its place. ``payload`` itself is left as it was."""
        return {key: value for key, value in payload.items() if key not in self.keys}

    def secret_keys_in(self, payload: JSONObject) -> frozenset[str]:
        """The secret keys ``payload`` carries (what a scrub would remove from it)."""
        return frozenset(key for key in payload if key in self.keys)

    def redact(self, payload: JSONObject) -> dict[str, Any]:
        """A copy of ``payload`` fit for a log line: each secret value replaced by
        :data:`REDACTED`, so the reader still sees which keys were there."""
        return {key: REDACTED if key in self.keys else value for key, value in payload.items()}
