"""The signup form: what a signup must carry, checked before anything is written.

Free-text fields (the company and the admin's name) refuse control characters outright (a line
break in a name ends up in an e-mail header or a log line otherwise) and the bidirectional
overrides that make a name read differently from what it is. The address must be one the e-mail
lane would accept (:func:`outbox_core.mail.validate_address`): a signup whose welcome could never
be sent is refused here, where the user can fix it, not parked later.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from typing import Final

import attrs

from outbox_core.errors import InvalidRecipient
from outbox_core.mail import validate_address

__all__ = ["FormError", "SignupForm", "slug_of"]

_MAX_TEXT: Final = 100
#: C0 and C1 controls, DEL, line and paragraph separators, bidirectional embeddings, overrides
#: and isolates.
_CONTROL: Final = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


class FormError(ValueError):
    """A field the signup can't take, and why (shown to the user next to the field)."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


def _text(raw: Mapping[str, object], field: str, label: str) -> str:
    value = raw.get(field)
    if not isinstance(value, str):
        raise FormError(field, f"{label} is required")
    if _CONTROL.search(value):
        raise FormError(field, f"{label} must not contain control characters")
    value = unicodedata.normalize("NFC", value).strip()
    if not value:
        raise FormError(field, f"{label} is required")
    if len(value) > _MAX_TEXT:
        raise FormError(field, f"{label} must be at most {_MAX_TEXT} characters")
    return value


def slug_of(company: str) -> str:
    """The tenant's slug: lower-case ASCII letters, digits and single dashes."""
    ascii_name = unicodedata.normalize("NFKD", company).encode("ascii", "ignore").decode()
    return re.sub(r"[^a-z0-9]+", "-", ascii_name.lower()).strip("-")[:40]


@attrs.frozen
class SignupForm:
    company: str
    admin_name: str
    admin_email: str

    @property
    def slug(self) -> str:
        return slug_of(self.company)

    @classmethod
    def parse(cls, raw: Mapping[str, object]) -> SignupForm:
        """The form from a JSON object or form fields; :class:`FormError` names the first bad
        field."""
        company = _text(raw, "company", "Company name")
        if not slug_of(company):
            raise FormError("company", "Company name needs at least one letter or digit")
        admin_name = _text(raw, "admin_name", "Your name")
        email = raw.get("admin_email")
        if not isinstance(email, str) or not email.strip():
            raise FormError("admin_email", "E-mail address is required")
        try:
            address = validate_address(email.strip())
        except InvalidRecipient as exc:
            raise FormError("admin_email", f"E-mail address is not valid: {exc}") from None
        return cls(company=company, admin_name=admin_name, admin_email=address)
