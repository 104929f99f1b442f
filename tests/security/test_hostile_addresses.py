"""Hostile recipient addresses, end to end through the real pipeline (RELIABILITY.md, hostile input).

Promise: an address that is not a plain, safe addr-spec is refused at enqueue where the caller can
catch it (``InvalidRecipient``); a row that holds one anyway (written around enqueue) fails at once,
permanently, with a reason, before any network I/O, so not one SMTP command reaches the server for
it; an address that is accepted goes on the wire exactly as validated (IDN domains as A-labels).

Mechanism under test: ``outbox_core.mail.validate_address``, applied by ``email_message`` at enqueue
and again at send time (``EmailPayload``, then ``build_message``/``OutgoingMail``). The mailer writes
the envelope address into ``RCPT TO:<...>`` as it is, so without that check a CR/LF address would be
a second SMTP command: the tests assert the exact command counts the server saw, and the refusal
reason each rule gives (remove a rule and the reason, or the counts, change).
"""

from __future__ import annotations

import re

import psycopg
import pytest
from hypothesis import event, example, given
from tests.strategies import hostile_addresses

from outbox_core.errors import InvalidMessage, InvalidPayload, InvalidRecipient
from outbox_core.mail import validate_address
from outbox_core.outcomes import Outcome, OutcomeKind

pytestmark = pytest.mark.integration

GOOD = "ann@example.org"

# (id, address, what the refusal must say). NUL is here too: PostgreSQL jsonb can't store U+0000, so
# the raw-row test leaves it out (and checks that the database refuses it).
HOSTILE = [
    ("crlf-rcpt", "a@b\r\nRCPT TO:<x>", "U+000D"),
    ("crlf-rcpt-full", "ann@example.org\r\nRCPT TO:<eve@evil.example>", "U+000D"),
    ("lf-bcc", "ann@example.org\nBcc: eve@evil.example", "U+000A"),
    ("cr-only", "ann@example.org\rDATA", "U+000D"),
    # Caught by the payload rule first (jsonb can't store it): InvalidPayload, an InvalidMessage too.
    ("nul", "ann\x00@example.org", "U+0000"),
    ("soh", "ann\x01@example.org", "U+0001"),
    ("esc", "ann@exam\x1bple.org", "U+001B"),
    ("tab", "ann@example.org\teve@evil.example", "U+0009"),
    ("del", "ann\x7f@example.org", "U+007F"),
    ("nel", "ann@example.org\x85Bcc: eve@evil.example", "U+0085"),
    ("line-separator", "ann@example.org\u2028Bcc: eve@evil.example", "U+2028"),
    ("comment-close", "alice@example.org) <bob@example.org>", "whitespace"),
    ("angle-pair", "alice@example.org><bob@example.org", "angle bracket"),
    ("display-name", "Alice <alice@example.org>", "whitespace"),
    ("comma-list", "alice@example.org,bob@example.org", "more than one '@'"),
    ("semicolon-list", "alice@example.org;bob@example.org", "more than one '@'"),
    ("comma-local", "alice,bob@example.org", "dot-atom"),
    ("semicolon-domain", "alice@example.org;x", "label"),
    ("missing-at", "alice.example.org", "no '@'"),
    ("two-ats", "alice@evil.example@example.org", "more than one '@'"),
    ("quoted-local", '"alice smith"@example.org', "whitespace"),
    ("quoted-local-plain", '"alice"@example.org', "quoted local parts"),
    ("quoted-local-at", '"eve@evil.example"@example.org', "quoted local parts"),
    ("quoted-escape", '"a\\"b"@example.org', "quoted local parts"),
    ("empty-local", "@example.org", "dot-atom"),
    ("empty-domain", "alice@", "no dot"),
    ("leading-dot", ".alice@example.org", "dot-atom"),
    ("double-dot", "al..ice@example.org", "dot-atom"),
    ("ip-literal", "alice@[127.0.0.1]", "IP-literal"),
    ("dotless-domain", "alice@localhost", "no dot"),
    ("numeric-tld", "alice@10.0.0.1", "all digits"),
    ("underscore-label", "alice@ex_ample.org", "label"),
    ("hyphen-label", "alice@-example.org", "label"),
    ("non-ascii-local", "ännchen@example.org", "not ASCII"),
    ("local-65", "a" * 65 + "@example.org", "local part is 65 octets"),
    ("label-64", "alice@" + "a" * 64 + ".org", "label"),
    ("total-264", "alice@" + ".".join(["a" * 50] * 5) + ".org", "the limit is 254"),
    ("huge", "a" * 100_000 + "@example.org", "the limit is 254"),
    ("idn-too-long", "alice@" + "ü" * 60 + ".example", "label"),
]
# Unicode domains that ARE accepted: they go on the wire as their IDNA A-label form.
IDN = [
    "alice@bücher.example",
    "Alice@Bücher.Example",
    "user@例え.テスト",
    "user@пример.испытание",
    "user@παράδειγμα.δοκιμή",
    "user@example。org",  # U+3002, an IDNA label separator
]


# --- at enqueue: refused where the caller can catch it -----------------------------------------


@pytest.mark.parametrize(
    ("address", "reason"), [p[1:] for p in HOSTILE], ids=[p[0] for p in HOSTILE]
)
def test_enqueue_refuses_a_hostile_address_naming_the_problem(pipeline, address, reason):
    refusal = InvalidPayload if "\x00" in address else InvalidRecipient
    with pytest.raises(refusal, match=re.escape(reason)):
        pipeline.email(to=address)
    # One hostile recipient among good ones refuses the whole message, not just itself.
    with pytest.raises(refusal):
        pipeline.email(to=[GOOD, address])
    with pytest.raises(refusal):
        pipeline.email(to=GOOD, reply_to=address)


def test_enqueue_refuses_a_recipient_that_is_not_a_string(pipeline):
    with pytest.raises(InvalidMessage, match="type int"):
        pipeline.email(to=[GOOD, 42])


# --- around enqueue: failed at send, permanently, with a reason, and nothing on the wire ------------


async def test_raw_rows_with_hostile_addresses_fail_at_once_and_never_reach_the_server(pipeline):
    storable = [
        (name, address, reason) for name, address, reason in HOSTILE if "\x00" not in address
    ]
    hostile_ids = {
        pipeline.insert_raw({"to": address, "subject": "Hello", "text": "Hi"}): (name, reason)
        for name, address, reason in storable
    }
    hostile_ids |= {
        pipeline.insert_raw({"to": [GOOD, address], "subject": "Hi", "text": "Hi"}): (name, reason)
        for name, address, reason in storable[:5]
    }
    hostile_ids |= {
        pipeline.insert_raw({"to": GOOD, "reply_to": address, "subject": "Hi", "text": "Hi"}): (
            name,
            reason,
        )
        for name, address, reason in storable[:5]
    }
    [good_id] = await pipeline.enqueue(pipeline.email(to=GOOD))

    mailer = pipeline.mailer()
    stats = await pipeline.drain(mailer)

    rows = pipeline.rows()
    for row_id, (name, reason) in hostile_ids.items():
        row = rows[row_id]
        assert row["status"] == "failed", name
        assert row["attempts"] == 1, f"{name}: retried instead of failed at once"
        assert row["last_error"].startswith("undeliverable: "), name
        assert reason in row["last_error"], name
    assert rows[good_id]["status"] == "dispatched"
    assert (stats.failed, stats.dispatched, stats.retried) == (len(hostile_ids), 1, 0)
    # 0 commands reached the server for any hostile row: the one MAIL and RCPT are the good row's.
    assert dict(pipeline.sink.handler.commands) == {"MAIL": 1, "RCPT": 1, "DATA": 1}
    [mail] = pipeline.sink.received
    assert mail.recipients == (GOOD,)
    assert mailer.stats.connections_opened == 1  # no connection was ever opened for a hostile row


def test_the_database_itself_cannot_hold_a_nul_address(pipeline):
    with pytest.raises(psycopg.Error, match=r"unsupported Unicode escape sequence"):
        pipeline.insert_raw({"to": "ann\x00@example.org", "subject": "Hi", "text": "Hi"})


# --- encoded words in a local part ---------------------------------------------------------------
# "=?utf-8?q?=0A?=" is all atext, so it IS a dot-atom local part; but a parser that decodes RFC 2047
# encoded words in address headers (the standard library's, which build_message's own re-parse uses)
# reads a newline in it. Such an address was once accepted at enqueue and refused at send by a bare
# ValueError from that re-parse, which the worker took for a handler crash: transient, retried for
# days. validate_address now refuses encoded-word syntax in a local part, and the re-parse turns
# any parser error into UnsafeHeader.
ENCODED_WORD_LOCALS = [
    "=?utf-8?q?=0A?=@example.org",
    "=?utf-8?b?CkJjYzogZXZlQGV2aWwuZXhhbXBsZQ==?=@example.org",  # "\nBcc: eve@evil.example"
]


@pytest.mark.parametrize("address", ENCODED_WORD_LOCALS)
def test_enqueue_refuses_an_encoded_word_local_part(pipeline, address):
    with pytest.raises(InvalidRecipient, match="encoded-word syntax"):
        pipeline.email(to=address)


async def test_an_encoded_word_local_part_never_reaches_the_server(pipeline):
    ids = [
        pipeline.insert_raw({"to": address, "subject": "Hi", "text": "Hi"})
        for address in ENCODED_WORD_LOCALS
    ]
    await pipeline.drain()
    rows = pipeline.rows()
    assert all(rows[i]["status"] != "dispatched" for i in ids)
    assert dict(pipeline.sink.handler.commands) == {}
    assert pipeline.sink.received == []


async def test_a_raw_row_with_an_encoded_word_local_part_fails_at_once(pipeline):
    ids = [
        pipeline.insert_raw({"to": address, "subject": "Hi", "text": "Hi"})
        for address in ENCODED_WORD_LOCALS
    ]
    await pipeline.drain()
    rows = pipeline.rows()
    for row_id in ids:
        assert (rows[row_id]["status"], rows[row_id]["attempts"]) == ("failed", 1)
        assert rows[row_id]["last_error"].startswith("undeliverable: ")
        assert "encoded-word syntax" in rows[row_id]["last_error"]


# --- accepted IDN domains: on the wire exactly as validated ----------------------------------------


async def test_an_idn_domain_goes_on_the_wire_as_the_validated_a_label(pipeline, wire_check):
    ids = await pipeline.enqueue(*(pipeline.email(to=address) for address in IDN))
    await pipeline.drain()

    by_row = pipeline.received_by_row()
    for row_id, address in zip(ids, IDN, strict=True):
        validated = validate_address(address)
        assert validated.isascii()
        [mail] = by_row[row_id]
        wire_check.delivered(mail, recipients=[validated])  # envelope AND To: the A-label
    assert pipeline.sink.handler.commands["RCPT"] == len(IDN)


# Python's 'idna' codec is IDNA 2003: it MAPS the deviation characters, so user@straße.de once went
# on the wire as user@strasse.de (the final sigma folded, ZWJ/ZWNJ dropped), another registered
# domain under IDNA 2008 (RFC 5890/5891): mail for one mailbox delivered to another domain's.
# Such a domain is now refused ("write the A-label form if you mean it").
@pytest.mark.parametrize(
    ("address", "not_this"),
    [
        ("user@straße.de", "user@strasse.de"),
        ("user@faß.example", "user@fass.example"),
        ("user@βόλος.gr", "user@xn--nxasmq6b.gr"),  # the A-label of the final sigma folded
    ],
)
def test_an_idna2008_deviation_domain_is_not_delivered_to_another_domain(address, not_this):
    # Refused: the mail never goes to the other domain, and the reason does not offer it either.
    with pytest.raises(InvalidRecipient, match="would be changed by IDNA 2003 mapping") as refused:
        validate_address(address)
    assert not_this not in str(refused.value)


# --- fuzzing through the real server ------------------------------------------------------------

# What an address on the wire may look like, written independently of validate_address.
_ENCODED_WORD = re.compile(r"=\?[^?]*\?[bBqQ]\?[^?]*\?=")
_SAFE_WIRE_ADDRESS = re.compile(
    r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*"
    r"@[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)+"
)


@given(raw=hostile_addresses)
@example(raw="a@b\r\nRCPT TO:<x>")
@example(raw="alice@example.org) <bob@example.org>")
@example(raw="alice@bücher.example")
@example(raw='"alice"@example.org')
@example(raw="=?utf-8?q?bob?=@example.org")
@example(raw="x=?utf-8?q?=0A?=@example.org")
def test_fuzzed_addresses_through_a_real_smtp_server(wire, wire_check, raw):
    outcome, received, commands = wire.send({"to": raw, "subject": "Hello", "text": "Hi"})
    assert isinstance(outcome, Outcome), f"the handler raised {outcome!r}"
    try:
        validated = validate_address(raw)
    except InvalidRecipient:
        event("refused: no command reached the server")
        assert outcome.kind is OutcomeKind.PERMANENT
        assert outcome.reason
        assert received == []
        assert not commands, f"commands reached the server for a refused address: {commands}"
        return
    assert _SAFE_WIRE_ADDRESS.fullmatch(validated), validated
    assert not _ENCODED_WORD.search(validated), validated  # a parser could decode it to a newline
    assert len(validated) <= 254
    assert validate_address(validated) == validated
    if validated.partition("@")[0].lower().startswith(("bounce", "transient")):
        # The sink refuses these recipients on purpose: one RCPT, nothing delivered.
        assert outcome.kind is not OutcomeKind.SENT
        assert received == []
        assert commands["RCPT"] == 1
        return
    assert outcome.kind is OutcomeKind.SENT, outcome.reason
    event("accepted: delivered as validated" + (" (IDN)" if not raw.isascii() else ""))
    [mail] = received
    wire_check.delivered(mail, recipients=[validated])  # the wire carries the validated form
    assert commands == {"MAIL": 1, "RCPT": 1, "DATA": 1}
