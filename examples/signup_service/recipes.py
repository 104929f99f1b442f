"""What the e-mail channel sends for a signup, and the confirmation links in it.

``tenant.provisioned`` → ``tenant_welcome`` to the admin, asking to confirm the address (double
opt-in), and the library's ``owner_notify`` to the platform owner. The confirmation link is signed
(itsdangerous, salted, dated) and travels in the ``setup_url`` field, one of the library's default
secret keys: it is filled in at send time and scrubbed from the stored row once the mail is sent.
Nothing about it is in the event: the broker never carries a secret.
"""

from __future__ import annotations

from typing import Final

from itsdangerous import BadSignature, SignatureExpired, URLSafeTimedSerializer

from outbox_adapters.lanes.email_channel import EmailDraft, EmailRecipes, platform_recipes
from outbox_core.errors import InvalidMessage
from outbox_core.events import EventEnvelope
from outbox_core.mail import clean_line

__all__ = ["ConfirmLinks", "signup_recipes"]

_SALT: Final = "signup-service/confirm-address"


class ConfirmLinks:
    """Signs and reads the admin's confirmation tokens."""

    def __init__(self, secret_key: str, public_url: str, *, max_age: float) -> None:
        self._signer = URLSafeTimedSerializer(secret_key, salt=_SALT)
        self.public_url = public_url.rstrip("/")
        self.max_age = max_age

    def link(self, user_id: str) -> str:
        return f"{self.public_url}/confirm?token={self._signer.dumps(user_id)}"

    def user_of(self, token: str) -> str | None:
        """The user id the token was made for, or ``None`` if it is forged, altered or expired."""
        try:
            user_id = self._signer.loads(token, max_age=int(self.max_age))
        except (BadSignature, SignatureExpired):
            return None
        return user_id if isinstance(user_id, str) else None


def _line(event: EventEnvelope, name: str) -> str:
    value = event.data.get(name, "")
    return clean_line(value if isinstance(value, str) else str(value))[:200]


def signup_recipes(links: ConfirmLinks, platform_owner: str) -> EmailRecipes:
    """The e-mail channel's recipes for the signup service."""

    def tenant_welcome(event: EventEnvelope) -> EmailDraft:
        admin, user_id = event.data.get("admin_email"), event.data.get("admin_user_id")
        if not isinstance(admin, str) or not isinstance(user_id, str):
            raise InvalidMessage("the event has no admin_email or admin_user_id")
        return EmailDraft(
            to=admin,
            subject="Confirm your address for $tenant_name",
            text=(
                "Hello $admin_display_name,\n\n"
                "Your workspace $tenant_name is ready. Before we send you anything else, please\n"
                "confirm that this address is yours:\n\n"
                "    $setup_url\n\n"
                "If you did not sign up, ignore this message: nothing more will be sent to you.\n"
            ),
            fields={
                "tenant_name": _line(event, "tenant_name"),
                "admin_display_name": _line(event, "admin_display_name") or "there",
                "setup_url": links.link(user_id),
            },
        )

    owner_notify = dict(platform_recipes(links.public_url, platform_owner)["tenant.provisioned"])[
        "owner_notify"
    ]
    return {
        "tenant.provisioned": (("tenant_welcome", tenant_welcome), ("owner_notify", owner_notify))
    }
