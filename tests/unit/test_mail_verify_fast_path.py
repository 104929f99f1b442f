"""The self-check's shortcut for plain address headers (``outbox_core.mail.verify._plain_list``).

The shortcut accepts an address header without parsing it only when its text is exactly the
intended bare addresses joined by ``", "``. That is sound only if the standard library's parser,
the check's oracle, reads every such text as exactly those addresses: proved here on generated
addresses of every shape the shortcut admits. If a Python release reads one differently, this
turns red, and the shortcut must go.
"""

from __future__ import annotations

import email.policy
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.strategies import ATEXT, plausible_addresses

from outbox_core.errors import UnsafeHeader
from outbox_core.mail import build_message
from outbox_core.mail.verify import _PLAIN_ADDRESS, Intended, _plain_list, verify_wire

_DEFAULT = email.policy.default
DAY = datetime(2026, 12, 2, tzinfo=UTC)

_atoms = st.text(ATEXT, min_size=1, max_size=10)
_ldh = st.text(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-", min_size=1, max_size=12
)
#: Every shape the shortcut admits: dot-atom local parts of any atext, LDH labels (even ones a
#: host-name rule would refuse: the grammar, not the validator, is what the shortcut relies on).
plain_addresses = st.builds(
    "{}@{}".format,
    st.lists(_atoms, min_size=1, max_size=4).map(".".join),
    st.lists(_ldh, min_size=2, max_size=4).map(".".join),
).filter(lambda a: "=?" not in a)


def parsed(name: str, value: str) -> list[str]:
    return [a.addr_spec for a in _DEFAULT.header_factory(name, value).addresses]


@given(st.lists(plain_addresses, min_size=1, max_size=6), st.sampled_from(["From", "To"]))
def test_every_text_the_shortcut_accepts_parses_to_exactly_the_intended_addresses(
    addresses: list[str], name: str
) -> None:
    value = ", ".join(addresses)
    assert _plain_list(value, addresses)
    assert parsed(name, value) == addresses


@given(st.lists(plausible_addresses, min_size=1, max_size=4))
def test_what_the_shortcut_accepts_among_plausible_addresses_parses_the_same(
    addresses: list[str],
) -> None:
    value = ", ".join(addresses)
    if _plain_list(value, addresses):
        assert parsed("To", value) == addresses


@pytest.mark.parametrize(
    ("value", "want"),
    [
        ('"Alice" <alice@example.org>', ["alice@example.org"]),  # a display name: parsed
        ("alice@example.org,bob@example.org", ["alice@example.org", "bob@example.org"]),
        ("bob@example.org, alice@example.org", ["alice@example.org", "bob@example.org"]),
        ("alice@example.org (comment)", ["alice@example.org"]),
        ("=?utf-8?q?a?=@example.org", ["=?utf-8?q?a?=@example.org"]),  # encoded-word syntax
        ("alice@[127.0.0.1]", ["alice@[127.0.0.1]"]),  # a domain literal
        ("alice@localhost", ["alice@localhost"]),  # a dotless domain
        ("", []),
        (None, []),
    ],
)
def test_anything_else_is_left_to_the_parser(value: str | None, want: list[str]) -> None:
    assert not _plain_list(value, want)


def test_the_pattern_is_the_bare_address_grammar_and_nothing_more() -> None:
    assert _PLAIN_ADDRESS.fullmatch("o'brien+tag.x{y}@mail-1.example.org")
    for bad in ("a..b@example.org", ".a@example.org", "a@example..org", "a b@example.org"):
        assert not _PLAIN_ADDRESS.fullmatch(bad)


def test_a_writer_that_wrote_other_addresses_is_still_caught() -> None:
    # A writer bug that puts a second address in To: the text differs from the intended one, so
    # the shortcut declines and the parser finds two addresses where one was meant.
    mail = build_message(
        sender="noreply@example.org",
        sender_name=None,
        to=["alice@example.org"],
        subject="Hi",
        text="Hello",
        html=None,
        reply_to=None,
        message_id="<1.a@example.org>",
        date=DAY,
    )
    tampered = mail.data.replace(
        b"To: alice@example.org", b"To: alice@example.org, eve@evil.example"
    )
    intended = Intended(
        sender="noreply@example.org",
        recipients=("alice@example.org",),
        reply_to=None,
        subject="Hi",
        date=DAY,
        message_id="<1.a@example.org>",
    )
    verify_wire(mail.data, intended)
    with pytest.raises(UnsafeHeader, match="To differ"):
        verify_wire(tampered, intended)
