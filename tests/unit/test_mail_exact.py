"""The exact refusals and boundaries of outbox_core.mail, pinned where mutation testing found them
loose (docs/testing.md): each address refusal as its whole sentence (the value shown, then why),
the header names as written on the wire, and the 78-character fold limit on both sides."""

from __future__ import annotations

import base64
import re
import time
from datetime import UTC, datetime, timedelta, timezone

import pytest
from tests.support.mail import build_mail

from outbox_core.errors import InvalidMessage, InvalidRecipient, UnsafeHeader
from outbox_core.mail import OutgoingMail, validate_address

DATE = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
MSGID = "<row-7.a1b2@outbox.example.org>"
WHY = " is not an acceptable recipient address: "


def build(**overrides: object) -> OutgoingMail:
    return build_mail(**{"message_id": MSGID, "date": DATE, **overrides})


def header_lines(out: OutgoingMail) -> list[str]:
    head = out.data.split(b"\r\n\r\n", 1)[0].decode("ascii")
    return head.split("\r\n")


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (42, "it is of type int, not a string"),
        ("ann\x07@example.org", "it contains the control character U+0007"),
        (
            "ann smith@example.org",
            "it contains whitespace; give a bare address, no name or comment",
        ),
        ("<ann@example.org", "it contains an angle bracket; give the bare address only"),
        ("ann@example.org>", "it contains an angle bracket; give the bare address only"),
        (
            '"ann"@example.org',
            "quoted local parts are not accepted (rare, and an injection vehicle)",
        ),
        ("annexample.org", "it has no '@'"),
        ("ann@b@example.org", "it has more than one '@'"),
        ("ännä@example.org", "its local part is not ASCII, and SMTPUTF8 is not supported"),
        (
            "ann..x@example.org",
            (
                "its local part 'ann..x' is not a dot-atom (RFC 5322 §3.4.1): letters, digits,"
                " !#$%&'*+-/=?^_`{|}~ and single dots, not at either end"
            ),
        ),
        ("a" * 65 + "@example.org", "its local part is 65 octets; the limit is 64 (RFC 5321)"),
        (
            "=?utf-8?q?x?=@example.org",
            (
                "its local part contains RFC 2047 encoded-word syntax ('=?' ... '?='), which a mail"
                " parser may decode into other text (a line break, another address)"
            ),
        ),
        (
            "ann@[127.0.0.1]",
            "IP-literal domains are not accepted; mail goes to a named domain",
        ),
        (
            "ann@localhost",
            "its domain 'localhost' has no dot; a bare host name is not a mail domain",
        ),
        (
            "ann@-bad-.org",
            (
                "its domain label '-bad-' is not a host-name label (RFC 1035): 1-63 letters,"
                " digits and hyphens, no hyphen at either end"
            ),
        ),
        (
            "ann@example.123",
            "its top-level label is all digits (an IP address is not accepted)",
        ),
    ],
)
def test_an_address_refusal_shows_the_value_and_says_why(raw: object, why: str) -> None:
    with pytest.raises(InvalidRecipient) as refused:
        validate_address(raw)  # type: ignore[arg-type]
    assert str(refused.value) == f"{raw!r}{WHY}{why}"


def test_a_too_long_address_is_refused_with_its_length() -> None:
    raw = "a" * 250 + "@x.org"
    with pytest.raises(InvalidRecipient) as refused:
        validate_address(raw)
    assert str(refused.value).endswith(
        f"{WHY}it is 256 characters long; the limit is 254 (RFC 5321)"
    )
    assert str(refused.value).startswith("'aaaa")


def test_only_the_top_level_label_may_not_be_all_digits() -> None:
    assert validate_address("ann@mail.123.org") == "ann@mail.123.org"
    assert validate_address("ann@123.example.org") == "ann@123.example.org"


def test_header_names_are_written_in_their_usual_case() -> None:
    out = build(reply_to="billing@example.org", sender_name="Billing")
    names = [line.split(":", 1)[0] for line in header_lines(out) if line[:1] not in " \t"]
    for name in ("From", "To", "Reply-To", "Subject", "Date", "Message-ID"):
        assert name in names


def test_the_date_header_is_in_utc() -> None:
    local = DATE.astimezone(timezone(timedelta(hours=9)))
    lines = header_lines(build(date=local))
    assert "Date: Mon, 30 Nov 2026 12:00:00 +0000" in lines


def test_a_subject_that_fits_in_78_characters_is_written_as_is() -> None:
    fits = "s" * (78 - len("Subject: "))
    assert f"Subject: {fits}" in header_lines(build(subject=fits))
    too_long = fits + "s"
    assert f"Subject: {too_long}" not in header_lines(build(subject=too_long))


def test_a_display_name_that_fits_in_78_characters_is_written_as_is() -> None:
    sender = "noreply@example.org"
    room = 78 - len("From: ") - len(" <>") - len(sender) - 2  # 2: the quotes
    fits = "n" * room
    assert f'From: "{fits}" <{sender}>' in header_lines(build(sender_name=fits))
    too_long = fits + "n"
    assert f'From: "{too_long}" <{sender}>' not in header_lines(build(sender_name=too_long))


def test_a_message_id_of_250_characters_is_accepted() -> None:
    message_id = "<" + "a" * 236 + "@example.org>"
    assert len(message_id) == 250
    assert build(message_id=message_id).message_id == message_id


@pytest.mark.parametrize("field", ["subject", "sender_name"])
def test_a_pre_encoded_word_is_refused_naming_the_field(field: str) -> None:
    with pytest.raises(UnsafeHeader) as refused:
        build(**{field: "=?utf-8?b?SGk=?="})
    assert str(refused.value) == (
        f"the {field} contains an RFC 2047 encoded word ('=?charset?B|Q?...?=') at character 1"
        " of 16; pre-encoded words are refused because decoding them could add a header or line"
    )


@pytest.mark.parametrize(
    ("overrides", "error", "message"),
    [
        ({"to": []}, InvalidRecipient, "a message needs at least one recipient; 'to' is empty"),
        (
            {"to": [f"a{i}@example.org" for i in range(101)]},
            InvalidRecipient,
            "a message has 101 recipients; the limit is 100 (RFC 5321 §4.5.3.1.8)",
        ),
        (
            {"date": datetime(2026, 1, 1)},  # noqa: DTZ001 - the naive value under test
            InvalidMessage,
            "date must be a timezone-aware datetime, got datetime.datetime(2026, 1, 1, 0, 0)",
        ),
        (
            {"message_id": "nope"},
            InvalidMessage,
            (
                "message_id 'nope' is not '<left@right>' with dot-atom ASCII halves and at most 250"
                " characters (RFC 5322 §3.6.4)"
            ),
        ),
    ],
)
def test_build_refusals_are_whole_sentences(overrides, error, message: str) -> None:
    with pytest.raises(error) as refused:
        build(**overrides)
    assert str(refused.value) == message


def test_a_domain_idna_would_change_is_refused_showing_both_forms() -> None:
    with pytest.raises(InvalidRecipient) as refused:
        validate_address("ann@exa\u00dfmple.org")
    assert str(refused.value) == (
        "'ann@exaßmple.org' is not an acceptable recipient address: its domain would be changed"
        " by IDNA 2003 mapping (exaßmple → exassmple): write the A-label form if you mean it"
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"envelope_from": "Ann@Example.org"},
            "envelope_from 'Ann@Example.org' is not normalised; build mail with build_message()",
        ),
        ({"recipients": ()}, "recipients must be a non-empty tuple, got ()"),
        (
            {"recipients": ("B@Example.org",)},
            "recipients 'B@Example.org' is not normalised; build mail with build_message()",
        ),
    ],
)
def test_an_outgoing_mail_not_made_by_build_message_is_refused(kwargs, message: str) -> None:
    fields = {
        "envelope_from": "a@example.org",
        "recipients": ("b@example.org",),
        "data": b"x",
        "message_id": MSGID,
        **kwargs,
    }
    with pytest.raises(InvalidRecipient) as refused:
        OutgoingMail(**fields)
    assert str(refused.value) == message


def test_the_multipart_boundary_is_derived_from_the_message_id() -> None:
    # The same row builds the same bytes on every attempt; two rows never share a boundary.
    first = build(html="<p>Hi</p>").data
    again = build(html="<p>Hi</p>").data
    other = build(html="<p>Hi</p>", message_id="<row-8.a1b2@outbox.example.org>").data
    boundaries = [re.findall(rb'boundary="(=_outbox_[0-9a-f]+)"', data) for data in (first, other)]
    assert first == again
    assert [len(found) for found in boundaries] == [1, 1]
    assert all(len(found[0]) == len("=_outbox_") + 32 for found in boundaries)
    assert boundaries[0] != boundaries[1]


def test_a_long_non_ascii_subject_is_split_into_short_encoded_words() -> None:
    subject = "é" + "a" * 200  # non-ASCII, so encoded; then one octet a character
    lines = "\r\n".join(header_lines(build(subject=subject)))
    words = re.findall(r"=\?utf-8\?b\?([A-Za-z0-9+/=]+)\?=", lines)
    assert len(words) > 1
    assert all(len(word) + len("=?utf-8?b??=") <= 75 for word in words)
    # Each word carries up to 45 octets (RFC 2047's 75-character limit): filled, not undercut.
    assert len(base64.b64decode(words[0])) == 45
    assert "".join(base64.b64decode(word).decode() for word in words) == subject


def test_the_date_header_is_utc_whatever_the_machines_zone(monkeypatch) -> None:
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        local = DATE.astimezone(timezone(timedelta(hours=-5)))
        assert "Date: Mon, 30 Nov 2026 12:00:00 +0000" in header_lines(build(date=local))
    finally:
        monkeypatch.undo()
        time.tzset()


def test_a_domain_without_an_a_label_form_is_refused_showing_the_address() -> None:
    with pytest.raises(InvalidRecipient) as refused:
        validate_address("ann@" + "ü" * 70 + ".org")
    assert str(refused.value).startswith("'ann@üüü")
    assert f"{WHY}its domain has no IDNA A-label form (" in str(refused.value)


def test_an_address_whose_a_label_form_is_too_long_is_refused_showing_it() -> None:
    raw = "a@" + ".".join(["ü" * 40] * 6) + ".de"  # 250 characters, 286 octets as A-labels
    assert len(raw) == 250
    with pytest.raises(InvalidRecipient) as refused:
        validate_address(raw)
    assert str(refused.value).startswith("'a@üüü")
    assert str(refused.value).endswith(
        f"{WHY}its A-label form is 286 octets; the limit is 254 (RFC 5321)"
    )
