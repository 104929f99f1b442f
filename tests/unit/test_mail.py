# Copyright 2026 leased-outbox developers. SPDX-License-Identifier: Apache-2.0
"""Mail safety (catalogue C7): hostile addresses and header values never reach the wire.

Header safety is proved on the exact bytes: every message built here is re-parsed with the stdlib
parser and its header names, addresses and subject are compared with what was intended.
"""

from __future__ import annotations

import email
import email.header
import email.policy
from datetime import UTC, datetime, timedelta, timezone
from email.message import EmailMessage
from typing import Any

import attrs
import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st
from tests.strategies import address_like, header_values
from tests.support.mail import build_mail

from outbox_core.errors import InvalidMessage, InvalidRecipient, UnsafeHeader
from outbox_core.mail import (
    MAX_HEADER_LENGTH,
    MAX_RECIPIENTS,
    OutgoingMail,
    check_header_value,
    clean_line,
    clean_text,
    headers,
    validate_address,
    verify,
)

DATE = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
MSGID = "<0190a1b2.c3@mail.example.org>"
SENDER = "noreply@example.org"
# Unicode category Cc, the line/paragraph separators and surrogates: nothing of this may survive.
UNSAFE = {chr(c) for c in range(0x20)} | {chr(c) for c in range(0x7F, 0xA0)} | {"\u2028", "\u2029"}
BASE_HEADERS = ["content-transfer-encoding", "content-type", "date", "from", "message-id"]
BASE_HEADERS += ["mime-version", "subject", "to"]


def build(**overrides: object) -> OutgoingMail:
    return build_mail(**{"sender": SENDER, "message_id": MSGID, "date": DATE, **overrides})


def parse(out: OutgoingMail) -> EmailMessage:
    parsed = email.message_from_bytes(out.data, policy=email.policy.default)
    assert isinstance(parsed, EmailMessage)
    return parsed


def header_names(parsed: EmailMessage) -> list[str]:
    return sorted(name.lower() for name in parsed)


def addresses(parsed: EmailMessage, name: str) -> list[str]:
    return [address.addr_spec for address in parsed[name].addresses]


def display_name(out: OutgoingMail) -> str:
    """The From display name as an RFC 2047 reader shows it.

    CPython 3.11's address parser keeps the space between two encoded words, which RFC 2047
    §6.2 says is not text, so a chain of encoded words is decoded with email.header instead.
    """
    raw = email.message_from_bytes(out.data, policy=email.policy.compat32)["From"]
    phrase = raw.rpartition("<")[0].strip()
    if not phrase.startswith("=?"):
        return str(parse(out)["From"].addresses[0].display_name)
    return str(email.header.make_header(email.header.decode_header(phrase)))


def assert_exactly(
    out: OutgoingMail,
    *,
    to: list[str],
    subject: str,
    name: str = "",
    reply_to: str | None = None,
    html: bool = False,
) -> EmailMessage:
    """The re-parsed bytes carry exactly the intended headers, addresses and subject."""
    parsed = parse(out)
    want = sorted(BASE_HEADERS + (["reply-to"] if reply_to else []))
    if html:
        want.remove("content-transfer-encoding")
    assert header_names(parsed) == want
    assert addresses(parsed, "From") == [out.envelope_from]
    assert display_name(out) == name
    assert addresses(parsed, "To") == to
    assert list(out.recipients) == to
    if reply_to:
        assert addresses(parsed, "Reply-To") == [reply_to]
    assert str(parsed["Subject"]) == subject
    assert out.data.isascii()
    lines = out.data.split(b"\r\n")
    assert lines[-1] == b""  # ends with CRLF
    assert all(b"\r" not in line and b"\n" not in line for line in lines)
    assert max(map(len, lines)) <= MAX_HEADER_LENGTH
    return parsed


# --------------------------------------------------------------------------- addresses

HOSTILE_ADDRESSES = [
    ("a@b\r\nRCPT TO:<x>", "control character U+000D"),
    ("alice@example.org\n", "control character U+000A"),
    ("alice@example.org) <bob@example.org>", "whitespace"),
    ("Alice <alice@example.org>", "whitespace"),
    ("<alice@example.org>", "angle bracket"),
    ("alice.example.org", "no '@'"),
    ("", "no '@'"),
    ("a\x00@example.org", "U+0000"),
    ("a\x7f@example.org", "U+007F"),
    ("a\x1b@example.org", "U+001B"),
    ("a\x85b@example.org", "U+0085"),
    ("a@exa\u2028mple.org", "U+2028"),
    ("a@exa\u2029mple.org", "U+2029"),
    ("a\ud800@example.org", "U+D800"),
    ("a\u00a0b@example.org", "whitespace"),
    ('"quoted"@example.org', "quoted local parts"),
    ('"a@b"@example.org', "quoted local parts"),
    ("a@b@example.org", "more than one '@'"),
    ("alice@example.org,bob@example.org", "more than one '@'"),
    ("a" * 65 + "@example.org", "65 octets; the limit is 64"),
    ("a@" + "b" * 250 + ".org", "the limit is 254"),
    ("a@" + "b" * 64 + ".org", "'" + "b" * 64 + "' is not a host-name label"),
    ("a@" + ".".join(["üüü"] * 60) + ".org", "A-label form is 605 octets"),
    ("@example.org", "not a dot-atom"),
    ("a.@example.org", "not a dot-atom"),
    (".a@example.org", "not a dot-atom"),
    ("a..b@example.org", "not a dot-atom"),
    ("a(comment)@example.org", "not a dot-atom"),
    ("a,b;c@example.org", "not a dot-atom"),
    ("a\\b@example.org", "not a dot-atom"),
    ("jörg@example.org", "SMTPUTF8 is not supported"),
    ("alice@", "has no dot"),
    ("alice@localhost", "has no dot"),
    ("alice@[192.0.2.1]", "IP-literal"),
    ("alice@[IPv6:2001:db8::1]", "IP-literal"),
    ("alice@192.0.2.1", "all digits"),
    ("alice@example.org.", "'' is not a host-name label"),
    ("alice@example..org", "'' is not a host-name label"),
    ("alice@-example.org", "'-example'"),
    ("alice@example-.org", "'example-'"),
    ("alice@exa_mple.org", "'exa_mple'"),
    ("alice@exa%mple.org", "'exa%mple'"),
    ("alice@ex\u00fcample..org", "no IDNA A-label form"),
    ("alice@" + "ü" * 70 + ".org", "no IDNA A-label form"),
    ("alice@xn--zz.bücher.example", "no IDNA A-label form"),  # an A-label that doesn't decode
    # RFC 2047 encoded-word syntax is atext, so a dot-atom can spell one; a parser may decode it.
    ("=?utf-8?q?=0A?=@example.org", "encoded-word syntax ('=?' ... '?=')"),
    ("=?utf-8?b?CkJjYzogZXZlQGV2aWwuZXhhbXBsZQ==?=@example.org", "encoded-word syntax"),
    ("=?utf-8?q?bob?=@example.org", "encoded-word syntax"),  # decodes to harmless text
    ("x.=?a?=.y@example.org", "encoded-word syntax"),  # not even a well-formed word
    # IDNA 2003 maps the IDNA 2008 deviation characters: another domain. Refused, not delivered.
    ("user@straße.de", "changed by IDNA 2003 mapping (straße → strasse): write the A-label form"),
    ("user@Faß.example", "(faß → fass)"),
    ("user@βόλος.gr", "(βόλος → βόλοσ)"),  # final sigma
    ("user@a\u200db.example", "(a\u200db → ab)"),  # ZWJ dropped
    ("user@exa\u00admple.org", "(exa\u00admple → example)"),  # soft hyphen dropped
    ("user@a\u2024b.example", "(a\u2024b → a)"),  # one label became two: 'a', 'b'
    ("user@b.a\u2024", "(a\u2024 → a)"),
]


@pytest.mark.parametrize(("raw", "reason"), HOSTILE_ADDRESSES)
def test_hostile_addresses_are_refused_with_the_reason(raw: str, reason: str) -> None:
    with pytest.raises(InvalidRecipient) as caught:
        validate_address(raw)
    message = str(caught.value)
    assert reason in message
    assert "not an acceptable recipient address" in message


@pytest.mark.parametrize("raw", [None, 42, b"alice@example.org", ["alice@example.org"]])
def test_non_strings_are_refused(raw: object) -> None:
    with pytest.raises(InvalidRecipient, match="not a string"):
        validate_address(raw)  # type: ignore[arg-type]


def test_the_refusal_message_of_a_huge_value_stays_short() -> None:
    with pytest.raises(InvalidRecipient) as caught:
        validate_address("a" * 1_000_000 + "@example.org")
    assert len(str(caught.value)) < 250


@pytest.mark.parametrize(
    ("raw", "normalised"),
    [
        ("alice@example.org", "alice@example.org"),
        ("Alice.Smith@Example.ORG", "Alice.Smith@example.org"),  # the local part keeps its case
        ("bob@bücher.example", "bob@xn--bcher-kva.example"),
        ("bob@BÜCHER.example", "bob@xn--bcher-kva.example"),
        ("bob@bücher。example", "bob@xn--bcher-kva.example"),  # an ideographic full stop
        ("bob@xn--bcher-kva.example", "bob@xn--bcher-kva.example"),
        ("bob@ΒΌΛΟΣ.gr", "bob@xn--nxasmq6b.gr"),  # an upper-case sigma is not a final one
        ("bob@Bücher.EXAMPLE", "bob@xn--bcher-kva.example"),  # an ASCII label keeps its case
        ("bob@xn--strae-oqa.de", "bob@xn--strae-oqa.de"),  # IDNA 2008 A-labels pass as they are
        ("bob@bu\u0308cher.example", "bob@xn--bcher-kva.example"),  # NFD: the same U-label
        ("a=b?c@example.org", "a=b?c@example.org"),  # '=' and '?' alone spell no encoded word
        ("x!#$%&'*+-/=?^_`{|}~@a-b.c0.example", "x!#$%&'*+-/=?^_`{|}~@a-b.c0.example"),
        ("a" * 64 + "@example.org", "a" * 64 + "@example.org"),
        ("a@" + "b" * 63 + ".org", "a@" + "b" * 63 + ".org"),
        ("a@" + ("b" * 63 + ".") * 3 + "c" * 60, "a@" + ("b" * 63 + ".") * 3 + "c" * 60),  # 254
    ],
)
def test_valid_addresses_are_normalised(raw: str, normalised: str) -> None:
    assert validate_address(raw) == normalised
    assert validate_address(normalised) == normalised


@given(st.text() | address_like | st.emails())
@example("bob@bücher.example")
@example("bob@exa\u00admple.org")  # a soft hyphen is mapped to nothing by IDNA
def test_validated_addresses_are_plain_and_idempotent(raw: str) -> None:
    try:
        address = validate_address(raw)
    except InvalidRecipient:
        return
    assert not UNSAFE & set(address)
    assert address.count("@") == 1
    assert address.isascii()
    assert len(address) <= 254
    assert not any(ch.isspace() or ch in '"<>()[],;:\\' for ch in address)
    assert validate_address(address) == address


@given(st.emails())
def test_plain_addresses_are_accepted(raw: str) -> None:
    local, _, domain = raw.rpartition("@")
    assume(len(raw) <= 254 and not domain.rpartition(".")[2].isdigit())
    assert validate_address(raw) == f"{local}@{domain.lower()}"


# --------------------------------------------------------------------------- free text


@pytest.mark.parametrize(
    ("raw", "cleaned"),
    [
        ("Invoice 7", "Invoice 7"),
        ("a\r\nBcc: x@y", "a  Bcc: x@y"),
        ("subject\n", "subject"),  # trailing newline
        ("\r\n  padded \t", "padded"),
        ("tab\there", "tab here"),
        ("nul\x00del\x7fesc\x1b", "nuldelesc"),
        ("nel\x85ls\u2028ps\u2029", "nel ls ps"),
        ("c1\x9b[31m", "c1[31m"),
        ("lone\ud800surrogate", "lonesurrogate"),
        ("café ☕", "café ☕"),
    ],
)
def test_clean_line(raw: str, cleaned: str) -> None:
    assert clean_line(raw) == cleaned


@pytest.mark.parametrize(
    ("raw", "cleaned"),
    [
        ("a\r\nb\rc\nd", "a\nb\nc\nd"),
        ("keep\ttabs\n", "keep\ttabs\n"),
        ("nel\x85ls\u2028ps\u2029", "nel\nls\nps\n"),
        ("nul\x00bell\x07del\x7fvt\x0bff\x0c", "nulbelldelvtff"),
        ("\x1b[2J", "[2J"),
        ("lone\udfffsurrogate", "lonesurrogate"),
    ],
)
def test_clean_text(raw: str, cleaned: str) -> None:
    assert clean_text(raw) == cleaned


@given(st.text(st.characters(codec=None)))
def test_cleaners_leave_no_unsafe_character_and_are_idempotent(raw: str) -> None:
    line = clean_line(raw)
    assert not (UNSAFE | {"\t"}) & set(line)
    assert not any(0xD800 <= ord(ch) <= 0xDFFF for ch in line)
    assert clean_line(line) == line
    body = clean_text(raw)
    assert not (UNSAFE - {"\n", "\t"}) & set(body)
    assert not any(0xD800 <= ord(ch) <= 0xDFFF for ch in body)
    assert clean_text(body) == body


# --------------------------------------------------------------------------- header values

_WORD = "contains an RFC 2047 encoded word ('=?charset?B|Q?...?=') at character"
HOSTILE_HEADER_VALUES = [
    ("=?UTF-8?Q?=0A?=Bcc: x@y", f"{_WORD} 1 of 23"),  # decodes to a LF
    ("Hi =?utf-8?q?=0D=0ABcc:_x@y?=", f"{_WORD} 4 of 29"),  # CRLF + a header
    ("=?utf-8?b?DQpCY2M6IHhAeQ==?=", f"{_WORD} 1 of"),
    ("=?utf-8?b?DQpCY2M6IHhAeQ?=", f"{_WORD} 1 of"),  # padding missing
    ("=?utf-8?q?a=22_=3Cevil=40x=3E?=", f"{_WORD} 1 of"),  # no control, still refused
    ("=?utf-8?q?caf=C3=A9?=", f"{_WORD} 1 of"),  # harmless text, still refused
    ("=?iso-8859-1*en?q?caf=E9?=", f"{_WORD} 1 of"),  # RFC 2231 language tag
    ("=?no-such-charset?B?SGk=?=", f"{_WORD} 1 of"),
    ("=?utf-8?b?Y?=", f"{_WORD} 1 of"),  # malformed base64
    ("=?utf-8?q?=ZZ?=", f"{_WORD} 1 of"),  # malformed quoted-printable
    ("=\x00?utf-8?q?=0A?=", f"{_WORD} 1 of 15"),  # appears only once the NUL is removed
    (
        "x" * (MAX_HEADER_LENGTH + 1),
        "is 999 characters long; the limit is 998 (the RFC 5322 §2.1.1 line limit)",
    ),
]


@pytest.mark.parametrize(("raw", "reason"), HOSTILE_HEADER_VALUES)
def test_unsafe_header_values_are_refused(raw: str, reason: str) -> None:
    with pytest.raises(UnsafeHeader) as caught:
        check_header_value(raw)
    assert reason in str(caught.value)


def test_a_header_value_must_be_a_string() -> None:
    with pytest.raises(UnsafeHeader, match=r"^the header value must be a string, not bytes$"):
        check_header_value(b"subject")  # type: ignore[arg-type]


SECRET_LINK = "https://shop.example/reset?token=s3cr3t-t0ken"


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (f"Reset {SECRET_LINK} =?utf-8?q?=0A?=", f"the subject {_WORD} 53 of 67; pre-encoded"),
        (f"Reset {SECRET_LINK}" + "x" * 1000, "the subject is 1051 characters long; the limit"),
        (["Reset", SECRET_LINK], "the subject must be a string, not list"),
    ],
)
def test_a_refusal_names_the_field_and_never_echoes_the_value(value: object, reason: str) -> None:
    # A rendered subject can hold a secret link: the error goes to last_error, logs and audit.
    with pytest.raises(UnsafeHeader) as caught:
        check_header_value(value, field="subject")  # type: ignore[arg-type]
    assert str(caught.value).startswith(reason)
    assert "s3cr3t" not in str(caught.value)
    assert "Reset" not in str(caught.value)


@pytest.mark.parametrize(
    ("raw", "cleaned"),
    [
        ("Invoice\r\nBcc: evil@example.org", "Invoice  Bcc: evil@example.org"),
        ("Invoice\n", "Invoice"),
        ("x" * MAX_HEADER_LENGTH + "\r\n", "x" * MAX_HEADER_LENGTH),  # the limit is after cleaning
        ("price =? ok ?=", "price =? ok ?="),  # not an encoded word
        ("=?utf-8?x?abc?=", "=?utf-8?x?abc?="),  # no such encoding: no reader decodes it
    ],
)
def test_safe_header_values_come_back_cleaned(raw: str, cleaned: str) -> None:
    assert check_header_value(raw) == cleaned


@given(header_values)
def test_encoded_words_never_pass(raw: str) -> None:
    try:
        value = check_header_value(raw)
    except UnsafeHeader:
        return
    assert headers.ENCODED_WORD.search(value) is None
    assert not UNSAFE & set(value)


# --------------------------------------------------------------------------- messages


def test_a_plain_message_reparses_to_exactly_the_intended_headers() -> None:
    out = build(to=["Alice@Example.ORG"], sender_name="Billing", reply_to="help@example.org")
    parsed = assert_exactly(
        out,
        to=["Alice@example.org"],
        subject="Your invoice",
        name="Billing",
        reply_to="help@example.org",
    )
    assert out.envelope_from == SENDER
    assert out.message_id == MSGID
    assert parsed["Message-ID"] == MSGID
    assert parsed["Date"].datetime == DATE
    assert parsed["Content-Transfer-Encoding"] == "quoted-printable"
    assert parsed.get_content() == "Hello\r\n"


def test_html_makes_a_multipart_alternative() -> None:
    out = build(text="plain\n", html="<p>html</p>")
    parsed = assert_exactly(out, to=["alice@example.org"], subject="Your invoice", html=True)
    assert parsed.get_content_type() == "multipart/alternative"
    parts = list(parsed.iter_parts())
    assert [p.get_content_type() for p in parts] == ["text/plain", "text/html"]
    assert [p.get_content() for p in parts] == ["plain\r\n", "<p>html</p>\r\n"]
    assert {p["Content-Transfer-Encoding"] for p in parts} == {"quoted-printable"}


def test_the_same_arguments_give_the_same_bytes() -> None:
    first = build(html="<p>x</p>", subject="Grüße")
    second = build(html="<p>x</p>", subject="Grüße")
    assert first.data == second.data
    assert b"boundary=" in first.data
    assert build(html="<p>x</p>", message_id="<other@example.org>").data != first.data


def test_a_body_cannot_fake_the_mime_boundary() -> None:
    out = build(html="<p>x</p>")
    boundary = parse(out).get_boundary()
    assert boundary is not None
    hostile = f"--{boundary}\nContent-Type: text/html\n\n<script>\n--{boundary}--\n"
    parsed = parse(build(text=hostile, html=hostile))
    crlf = hostile.replace("\n", "\r\n")
    assert [p.get_content() for p in parsed.iter_parts()] == [crlf, crlf]


def test_a_non_utc_date_is_written_in_utc() -> None:
    odd = timezone(timedelta(hours=5, minutes=30, seconds=7))
    when = datetime(2026, 1, 1, 12, 0, 0, 123, tzinfo=odd)
    parsed = parse(build(date=when))
    assert parsed["Date"].datetime == when.replace(microsecond=0)
    assert str(parsed["Date"]).endswith("+0000")


HOSTILE_SUBJECTS = [
    ("Invoice\r\nBcc: evil@example.org", "Invoice  Bcc: evil@example.org"),
    ("Invoice\nBcc: evil@example.org", "Invoice Bcc: evil@example.org"),
    ("Invoice\rBcc: evil@example.org", "Invoice Bcc: evil@example.org"),
    ("Invoice\r\n", "Invoice"),
    ("Invoice\r\n\r\nbody injection", "Invoice    body injection"),
    ("Invoice\u2028Bcc: evil@example.org", "Invoice Bcc: evil@example.org"),
    ("Invoice\x85Bcc: evil@example.org", "Invoice Bcc: evil@example.org"),
    ("Rechnung für Jörg\nBcc: evil@example.org", "Rechnung für Jörg Bcc: evil@example.org"),
    ("x" * MAX_HEADER_LENGTH, "x" * MAX_HEADER_LENGTH),
    ("ü" * MAX_HEADER_LENGTH, "ü" * MAX_HEADER_LENGTH),
    (" ".join(["word"] * 199), " ".join(["word"] * 199)),
]


@pytest.mark.parametrize(("subject", "cleaned"), HOSTILE_SUBJECTS)
def test_hostile_subjects_cannot_add_a_header(subject: str, cleaned: str) -> None:
    assert_exactly(build(subject=subject), to=["alice@example.org"], subject=cleaned)


@pytest.mark.parametrize(
    "name",
    [
        "Billing\r\nBcc: evil@example.org",
        "Evil <evil@example.org>",
        'Evil" <evil@example.org>, "x',
        "Evil, Inc. <evil@example.org>",
        "Jörg, Müller <evil@example.org>",
        "back\\slash\\",
        "(comment) name",
        "x" * MAX_HEADER_LENGTH,
        '"' * MAX_HEADER_LENGTH,
        '"<evil@example.org>' * 40,
        "é" * MAX_HEADER_LENGTH,
        "😀" * MAX_HEADER_LENGTH,
        "Jörg Müller  von\tder Vogelweide",
    ],
)
def test_hostile_display_names_cannot_add_a_header_or_an_address(name: str) -> None:
    out = build(sender_name=name)
    assert_exactly(out, to=["alice@example.org"], subject="Your invoice", name=clean_line(name))


@pytest.mark.parametrize(
    ("overrides", "error", "reason"),
    [
        ({"subject": "=?UTF-8?Q?=0A?=Bcc: x@y"}, UnsafeHeader, "encoded word"),
        ({"sender_name": "=?utf-8?q?a=22_=3Cevil=40x=3E?="}, UnsafeHeader, "encoded word"),
        ({"sender_name": "x" * 999}, UnsafeHeader, "the limit is 998"),
        ({"subject": "x" * 999}, UnsafeHeader, "the limit is 998"),
        ({"to": ["a@b\r\nRCPT TO:<x>"]}, InvalidRecipient, r"U\+000D"),
        ({"to": ["ok@example.org", "a@example.org) <b@example.org>"]}, InvalidRecipient, "white"),
        ({"to": []}, InvalidRecipient, "at least one recipient"),
        ({"to": [f"r{i}@example.org" for i in range(101)]}, InvalidRecipient, "limit is 100"),
        ({"sender": "noreply@localhost"}, InvalidRecipient, "has no dot"),
        ({"reply_to": '"x"@example.org'}, InvalidRecipient, "quoted"),
        ({"message_id": "no-brackets@example.org"}, InvalidMessage, "message_id"),
        ({"message_id": "<no-at-sign>"}, InvalidMessage, "message_id"),
        ({"message_id": "<a@b>\r\nBcc: x@y"}, InvalidMessage, "message_id"),
        ({"message_id": "<a b@c>"}, InvalidMessage, "message_id"),
        ({"message_id": "<" + "a" * 240 + "@example.org>"}, InvalidMessage, "at most 250"),
        ({"message_id": None}, InvalidMessage, "message_id"),
        ({"date": datetime(2026, 1, 1)}, InvalidMessage, "timezone-aware"),  # noqa: DTZ001
        ({"date": "2026-01-01"}, InvalidMessage, "timezone-aware"),
    ],
)
def test_unsafe_messages_are_refused_before_serialising(
    overrides: dict[str, object], error: type[Exception], reason: str
) -> None:
    with pytest.raises(error, match=reason):
        build(**overrides)


def test_recipients_are_normalised_and_deduplicated_in_order() -> None:
    out = build(to=["B@Bücher.example", "a@example.org", "B@xn--bcher-kva.EXAMPLE"])
    assert out.recipients == ("B@xn--bcher-kva.example", "a@example.org")
    assert_exactly(out, to=list(out.recipients), subject="Your invoice")


def test_a_single_address_string_is_one_recipient() -> None:
    assert build(to="alice@example.org").recipients == ("alice@example.org",)


def test_exactly_max_recipients_are_accepted() -> None:
    to = [f"r{i}@example.org" for i in range(MAX_RECIPIENTS)]
    assert_exactly(build(to=to), to=to, subject="Your invoice")


addresses_st = st.sampled_from(
    ["alice@example.org", "Bob.Smith@Example.ORG", "x+tag@bücher.example", "o'neil@ex-ample.co.uk"]
)


@given(
    subject=header_values,
    name=st.none() | header_values,
    text=header_values,
    html=st.none() | header_values,
    to=st.lists(addresses_st, min_size=1, max_size=4),
)
def test_any_text_either_is_refused_or_reparses_to_exactly_the_intended_message(
    subject: str, name: str | None, text: str, html: str | None, to: list[str]
) -> None:
    expected_to = list(dict.fromkeys(validate_address(a) for a in to))
    try:
        check_header_value(subject)
        if name is not None:
            check_header_value(name)
    except UnsafeHeader:
        # Refused by the input gate, so the message must be refused too, for the same reason.
        with pytest.raises(UnsafeHeader, match=r"encoded word|the limit is"):
            build(subject=subject, sender_name=name, text=text, html=html, to=to)
        return
    # Accepted by the input gate: the output gate must never have to step in.
    out = build(subject=subject, sender_name=name, text=text, html=html, to=to)
    parsed = assert_exactly(
        out,
        to=expected_to,
        subject=clean_line(subject),
        name=clean_line(name or ""),
        html=html is not None,
    )
    bodies = [text] if html is None else [text, html]
    parts = [parsed] if html is None else list(parsed.iter_parts())
    for body, part in zip(bodies, parts, strict=True):
        cleaned = clean_text(body)
        want = cleaned if cleaned.endswith("\n") else cleaned + "\n"
        assert part.get_content() == want.replace("\n", "\r\n")


# --------------------------------------------------------------------------- the output gate


def _intended(out: OutgoingMail, **changes: Any) -> verify.Intended:
    base = verify.Intended(
        sender=SENDER,
        recipients=out.recipients,
        reply_to=None,
        subject="Your invoice",
        date=DATE,
        message_id=MSGID,
    )
    return attrs.evolve(base, **changes)


def test_the_output_gate_accepts_what_build_message_makes() -> None:
    out = build()
    verify.verify_wire(out.data, _intended(out))


@pytest.mark.parametrize(
    ("mutate", "multipart", "changes", "what"),
    [
        (
            lambda d: d.replace(b"Subject:", b"Bcc: evil@example.org\r\nSubject:"),
            False,
            {},
            "header names",
        ),
        (lambda d: d.replace(b"To: alice@", b"To: evil@example.org, alice@"), False, {}, "To"),
        (lambda d: d.replace(b"From: ", b"From: evil@example.org, "), False, {}, "From"),
        (lambda d: d, False, {"reply_to": "r@example.org"}, "header names"),
        (lambda d: d.replace(b"Subject: Your", b"Subject: Our"), False, {}, "Subject"),
        (lambda d: d.replace(b"2026", b"2027"), False, {}, "Date"),
        (lambda d: d.replace(b"<0190a1b2", b"<0190a1b3"), False, {}, "Message-ID"),
        (lambda d: d, True, {}, "header names"),
        (
            lambda d: d.replace(b"Subject: Your invoice", "Subject: Yöur".encode()),
            False,
            {},
            "7-bit",
        ),
        (lambda d: d.replace(b"Hello", b"H" * 999), False, {}, "998 octets"),
        (lambda d: d.replace(b"Hello\r\n", b"Hello\nBcc: x@y\r\n"), False, {}, "CRLF"),
        (lambda d: d.replace(b"Hello\r\n", b"Hello\rX\r\n"), False, {}, "CRLF"),
    ],
)
def test_the_output_gate_refuses_bytes_that_differ_from_the_intent(
    mutate: object, multipart: bool, changes: dict[str, object], what: str
) -> None:
    out = build()
    data = mutate(out.data)  # type: ignore[operator]
    with pytest.raises(UnsafeHeader, match=what) as caught:
        verify.verify_wire(data, _intended(out, html=multipart, **changes))
    assert "it was not sent" in str(caught.value)


def test_the_output_gate_never_echoes_the_values_it_compared() -> None:
    out = build(subject=f"Reset: {SECRET_LINK}")
    with pytest.raises(UnsafeHeader, match=r"\(Subject differ\)") as caught:
        verify.verify_wire(out.data, _intended(out, subject="Reset"))
    assert "s3cr3t" not in str(caught.value)


@pytest.mark.parametrize(
    "to",
    [b"To: =?utf-8?q?=0A?=@example.org", b"To: =?utf-8?b?CkJjYzogZXZlQGV2aWwuZXhhbXBsZQ==?=@x.org"],
)
def test_the_output_gate_turns_any_parser_error_into_unsafe_header(to: bytes) -> None:
    # An address the parser decodes into a line break makes it raise a bare ValueError; the gate
    # must answer UnsafeHeader (a permanent failure), never let it escape (a crash, retried).
    out = build()
    data = out.data.replace(b"To: alice@example.org", to)
    assert data != out.data
    with pytest.raises(UnsafeHeader, match=r"could not be re-parsed \(ValueError\); it was not"):
        verify.verify_wire(data, _intended(out))


def test_the_output_gate_checks_the_mime_structure() -> None:
    out = build(html="<p>x</p>")
    verify.verify_wire(out.data, _intended(out, html=True))
    data = out.data.replace(b"Content-Type: text/html", b"Content-Type: text/x-evil")
    with pytest.raises(UnsafeHeader, match="MIME parts"):
        verify.verify_wire(data, _intended(out, html=True))


# --------------------------------------------------------------------------- OutgoingMail


def test_outgoing_mail_only_holds_normalised_addresses() -> None:
    good = build()
    assert attrs.evolve(good) == good
    with pytest.raises(InvalidRecipient, match="not normalised"):
        attrs.evolve(good, envelope_from="NoReply@EXAMPLE.org")
    with pytest.raises(InvalidRecipient, match="not normalised"):
        attrs.evolve(good, recipients=("alice@EXAMPLE.org",))
    with pytest.raises(InvalidRecipient, match=r"U\+000A"):
        attrs.evolve(good, recipients=("alice@example.org\nRCPT TO:<x@y>",))
    with pytest.raises(InvalidRecipient, match="non-empty tuple"):
        attrs.evolve(good, recipients=())
    with pytest.raises(InvalidRecipient, match="non-empty tuple"):
        attrs.evolve(good, recipients=["alice@example.org"])  # type: ignore[arg-type]
    with pytest.raises(InvalidMessage, match="message_id"):
        attrs.evolve(good, message_id="<x>")
    with pytest.raises(TypeError):
        attrs.evolve(good, data="text")  # type: ignore[arg-type]
    assert "data" not in repr(good)


def test_the_whitespace_test_of_an_address_is_str_isspace_on_every_code_point() -> None:
    # validate_address finds whitespace with a regex (\s); it must be exactly str.isspace().
    from outbox_core.mail.addresses import _SPACE  # noqa: PLC0415 - the one private pattern

    found = [cp for cp in range(0x110000) if bool(_SPACE.search(chr(cp))) != chr(cp).isspace()]
    assert found == []
