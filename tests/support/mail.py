"""Messages built with ``outbox_core.mail.build_message`` from one set of defaults."""

from __future__ import annotations

from datetime import UTC, datetime

from outbox_core.mail import OutgoingMail, build_message


def build_mail(**overrides: object) -> OutgoingMail:
    """A one-recipient invoice mail from noreply@example.org, with a fixed Message-ID and Date;
    ``overrides`` replace any argument of ``build_message`` (unchecked: tests pass hostile values
    on purpose)."""
    kwargs: dict[str, object] = {
        "sender": "noreply@example.org",
        "to": ["alice@example.org"],
        "subject": "Your invoice",
        "text": "Hello\n",
        "message_id": "<invoice-1@example.org>",
        "date": datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC),
    }
    kwargs.update(overrides)
    return build_message(**kwargs)  # type: ignore[arg-type]
