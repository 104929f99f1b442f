"""The message bytes ``build_message`` writes itself, against the ``email`` package as an oracle.

``outbox_core.mail.mime`` writes the MIME body directly (quoted-printable, the stdlib's encoder) instead
of running the ``email`` package's content manager and generator on every send. The layout must be
the one the package gives: this module builds the same message the package's way (what
``build_message`` did before) and compares the bytes, on fixed edge cases and on random text.
"""

from __future__ import annotations

import email.headerregistry
import email.policy
import email.utils
import hashlib
from datetime import UTC, datetime
from email.message import EmailMessage
from typing import cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from outbox_core.mail import build_message, clean_text

DATE = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
MSGID = "<row-7.a1b2@outbox.example.org>"
_PACKAGE_POLICY = email.policy.SMTP.clone(refold_source="none")


def by_the_package(text: str, html: str | None, subject: str) -> bytes:
    """The message as the email package writes it (headers given raw, as the library writes them)."""
    msg = EmailMessage(policy=_PACKAGE_POLICY)
    msg.set_raw("From", "noreply@example.org")
    msg.set_raw("To", "alice@example.org")
    msg.set_raw("Subject", subject)
    msg.set_raw("Date", email.utils.format_datetime(DATE))
    msg.set_raw("Message-ID", MSGID)
    msg.set_content(clean_text(text), cte="quoted-printable")
    if html is not None:
        msg.add_alternative(clean_text(html), subtype="html", cte="quoted-printable")
        digest = hashlib.sha256(MSGID.encode("ascii")).hexdigest()[:32]
        msg.set_boundary(f"=_outbox_{digest}")
    return msg.as_bytes()


def by_the_library(text: str, html: str | None, subject: str) -> bytes:
    return build_message(
        sender="noreply@example.org",
        to=["alice@example.org"],
        subject=subject,
        text=text,
        html=html,
        message_id=MSGID,
        date=DATE,
    ).data


EDGES = [
    "",
    "\n",
    "Hello",
    "Hello\n",
    "trailing spaces   \nand a tab\t\n",
    "x" * 200,
    "y" * 76 + "\n" + "z" * 77 + "\n" + "w" * 78,
    "=3D is not a code, = alone neither, ==\n",
    ".\n.leading dot\n..\n",
    "From the top\nFrom here\n",
    "caf\u00e9 \u20ac \U0001f600 " * 10,
    "windows\r\nline\rbreaks\u2028and\u0085unicode ones\x0b\x0c",
    "--=_outbox_0123 a boundary-looking line\n--\n",
    "a\x00b\x01c\x7fd",
]


@pytest.mark.parametrize("text", EDGES)
@pytest.mark.parametrize("with_html", [False, True], ids=["plain", "alternative"])
def test_the_library_writes_the_bytes_the_email_package_writes(text: str, with_html: bool) -> None:
    html = f"<p>{text}</p>" if with_html else None
    assert by_the_library(text, html, "Hi") == by_the_package(text, html, "Hi")


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=400), html=st.none() | st.text(max_size=400))
def test_on_random_text_too(text: str, html: str | None) -> None:
    assert by_the_library(text, html, "Hi") == by_the_package(text, html, "Hi")


def test_the_self_check_makes_each_header_class_once_per_name() -> None:
    """The re-parse's registry keeps one class per header name (any case), made by the stdlib."""
    from outbox_core.mail.verify import HeaderClasses  # noqa: PLC0415 - the piece under test

    registry = HeaderClasses()
    from_class = registry["From"]
    assert registry["from"] is from_class
    assert registry["FROM"] is from_class
    # typeshed draws the header kinds apart from BaseHeader; the registry's classes are both.
    assert issubclass(cast("type", from_class), email.headerregistry.AddressHeader)
    assert issubclass(registry["Subject"], email.headerregistry.UnstructuredHeader)
    assert registry["X-Anything"] is registry["x-anything"]
