"""Hostile header values, end to end through the real pipeline (RELIABILITY.md, hostile input).

Promise: whatever a subject, a display name or a template variable holds (raw CR/LF, a trailing
newline, an RFC 2047 encoded word that decodes to a newline, very long text), no extra header ever
reaches the server. Checked on the exact bytes the real SMTP server received, re-parsed with the
standard library: the header names are exactly the intended set (no Bcc, no Cc, no second Subject),
the envelope recipients are exactly the intended one, every header line is a wanted header or a
continuation, and the decoded values carry no CR or LF.

Mechanisms under test: ``outbox_core.mail.check_header_value`` / ``clean_line`` (control characters
out, encoded words and over-long values refused), the library's own header serialisation, and
``build_message``'s re-parse of its own bytes; ``email_message`` applies the rules at enqueue,
``EmailHandler`` again at send. The gates back each other up, so the tests pin both the outcome
(nothing extra on the wire, exact command counts) and the first gate's reason for each refusal.
Body values are checked too: a template variable may carry ``\\r\\n.\\r\\n`` (SMTP smuggling).
"""

from __future__ import annotations

import re

import pytest
from hypothesis import event, example, given
from hypothesis import strategies as st
from tests.strategies import header_values

from outbox_core.email_payload import EmailPayload
from outbox_core.errors import InvalidMessage, UnsafeHeader
from outbox_core.mail import clean_line, clean_text
from outbox_core.outcomes import Outcome, OutcomeKind
from outbox_core.payload import validate_payload

pytestmark = pytest.mark.integration

GOOD = "ann@example.org"
_ENCODED_WORD = re.compile(r"=\?[^?]*\?[bBqQ]\?[^?]*\?=")

# (id, value). Whether a value is refused follows from two rules, written out in ``refusal``.
VALUES = [
    ("crlf-bcc", "Hello\r\nBcc: eve@evil.example"),
    ("lf-bcc", "Hello\nBcc: eve@evil.example"),
    ("cr-bcc", "Hello\rBcc: eve@evil.example"),
    ("crlf-crlf-body", "Hello\r\n\r\nInjected body text"),
    ("trailing-newline", "Hello\n"),
    ("trailing-crlf", "Hello\r\n"),
    ("leading-newline", "\nBcc: eve@evil.example"),
    ("folded-continuation", "Hello\r\n Bcc: eve@evil.example"),
    ("second-subject", "Hello\r\nSubject: pay now"),
    ("nel", "Hello\x85Bcc: eve@evil.example"),
    ("line-separator", "Hello\u2028Bcc: eve@evil.example"),
    ("vt-ff", "Hello\x0bBcc:\x0ceve@evil.example"),
    ("encoded-word-q", "=?UTF-8?Q?=0A?=Bcc: x@y"),
    ("encoded-word-b", "=?UTF-8?B?CkJjYzogZXZlQGV2aWwuZXhhbXBsZQ==?="),
    ("encoded-word-crlf", "=?utf-8?q?Hello=0D=0ABcc:_eve@evil.example?="),
    ("encoded-word-mid", "Hi =?utf-8?q?=0A?= there"),
    ("encoded-word-split", "=?utf-8?q?=0A?= =?utf-8?q?Bcc:_x@y?="),
    ("quote-angle", 'Eve" <eve@evil.example>, "x'),
    ("comma-addresses", "eve@evil.example, mallory@evil.example"),
    ("backslash-quote", 'Eve\\" <eve@evil.example>'),
    ("long-998", "x" * 998),
    ("long-999", "x" * 999),
    ("long-words-then-crlf", "word " * 180 + "\r\nBcc: eve@evil.example"),
    ("long-unicode-then-lf", "é" * 400 + "\nBcc: eve@evil.example"),
    ("huge", "A" * 100_000),
    ("unicode-crlf", "Grüße\r\nBcc: eve@evil.example"),
]
# Template variables in the BODY: SMTP smuggling and boundary tricks (the body may hold newlines).
BODY_VALUES = [
    (
        "smuggle-crlf",
        "x\r\n.\r\nMAIL FROM:<eve@evil.example>\r\nRCPT TO:<eve@evil.example>\r\nDATA\r\nHi\r\n.\r\n",
    ),
    ("smuggle-lf", "x\n.\nMAIL FROM:<eve@evil.example>\nRCPT TO:<eve@evil.example>\nDATA\nHi\n.\n"),
    ("smuggle-cr", "x\r.\rMAIL FROM:<eve@evil.example>\r"),
    ("smuggle-mixed", "x\n.\r\nRCPT TO:<eve@evil.example>\r\n"),
    ("lone-dot", "."),
    ("dot-lines", "..\n.\n...\n"),
    ("boundary-like", "--=_outbox_0123\r\nContent-Type: text/html\r\n\r\n<script>"),
    ("header-in-body", "\r\n\r\nBcc: eve@evil.example"),
    *VALUES,
]
# Where a value goes: (position, payload builder).
POSITIONS = {
    "subject": lambda v: {"subject": v.replace("$", "$$"), "text": "Hi"},
    "sender_name": lambda v: {"subject": "Hi", "text": "Hi", "sender_name": v},
    "subject_field": lambda v: {"subject": "Re: $v", "text": "Hi", "v": v},
    "text_field": lambda v: {"subject": "Hi", "text": "Hi $v", "v": v},
    "html_field": lambda v: {"subject": "Hi", "text": "Hi", "html": "<p>$v</p>", "v": v},
}
CASES = [
    (position, name, value)
    for position in POSITIONS
    for name, value in (
        BODY_VALUES if position.endswith("_field") and position != "subject_field" else VALUES
    )
]


def refusal(position: str, value: str) -> str | None:
    """What the refusal must mention, or None when the value must go through (and be cleaned).

    Written from the rules (RELIABILITY.md; RFC 2047, RFC 5322 §2.1.1), not read from the library:
    a header value with an encoded word, or longer than 998 characters once cleaned, is refused.
    """
    if position in {"text_field", "html_field"}:
        return None  # bodies may hold anything; they are encoded, never refused
    rendered = "Re: " + clean_line(value) if position == "subject_field" else value
    cleaned = clean_line(rendered)
    if _ENCODED_WORD.search(cleaned):
        return "encoded word"
    if len(cleaned) > 998:
        return "the limit is"
    return None


def payload(position: str, value: str) -> dict[str, object]:
    return {"to": GOOD, **POSITIONS[position](value)}


# --- at enqueue ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("position", "value"), [c[0::2] for c in CASES], ids=[f"{c[0]}-{c[1]}" for c in CASES]
)
def test_enqueue_refuses_or_cleans_a_hostile_header_value(pipeline, position, value):
    parts = POSITIONS[position](value)
    fields = {k: v for k, v in parts.items() if k not in {"subject", "text", "html", "sender_name"}}
    build = {k: v for k, v in parts.items() if k in {"subject", "text", "html", "sender_name"}}
    expected = refusal(position, value)
    if expected is not None:
        with pytest.raises(UnsafeHeader, match=expected):
            pipeline.email(to=GOOD, fields=fields, **build)
        return
    message = pipeline.email(to=GOOD, fields=fields, **build)
    subject, _, _ = EmailPayload.from_payload(message.payload).render()
    assert "\r" not in subject
    assert "\n" not in subject


# --- the whole pipeline: enqueued rows and raw rows, one drain ----------------------------------


async def test_no_extra_header_reaches_the_server_through_the_pipeline(pipeline, wire_check):
    accepted: dict[int, tuple[str, str, str]] = {}
    refused: dict[int, tuple[str, str, str]] = {}
    messages = []
    for position, name, value in CASES:
        if refusal(position, value) is None:
            messages.append((position, name, value))
        else:
            # Written around enqueue (which would refuse it): the send must refuse it too.
            refused[pipeline.insert_raw(payload(position, value))] = (position, name, value)
    ids = await pipeline.enqueue(
        *(
            pipeline.email(
                to=GOOD,
                fields={k: v for k, v in POSITIONS[p](v).items() if k == "v"},
                **{k: v for k, v in POSITIONS[p](v).items() if k != "v"},
            )
            for p, _, v in messages
        )
    )
    accepted = dict(zip(ids, messages, strict=True))

    await pipeline.drain()

    rows = pipeline.rows()
    by_row = pipeline.received_by_row()
    for row_id, (position, name, value) in accepted.items():
        assert rows[row_id]["status"] == "dispatched", (position, name, rows[row_id]["last_error"])
        [mail] = by_row[row_id]
        multipart = position == "html_field"
        message = wire_check.delivered(mail, recipients=[GOOD], multipart=multipart)
        check_values(wire_check, message, mail.data, position, value)
    for row_id, (position, name, _) in refused.items():
        row = rows[row_id]
        assert (row["status"], row["attempts"]) == ("failed", 1), (position, name)
        assert row["last_error"].startswith("undeliverable: "), (position, name)
        assert row_id not in by_row
    # Every command the server saw belongs to an accepted row: one MAIL, one RCPT, one DATA each.
    n = len(accepted)
    assert dict(pipeline.sink.handler.commands) == {"MAIL": n, "RCPT": n, "DATA": n}
    assert all(mail.recipients == (GOOD,) for mail in pipeline.sink.received)


def check_values(wire_check, message, data: bytes, position: str, value: str) -> None:
    """The decoded header/body says what was intended: the value, cleaned, nothing more."""
    if position == "subject":
        assert str(message["Subject"]) == clean_line(value)
    elif position == "subject_field":
        assert str(message["Subject"]) == clean_line("Re: " + clean_line(value))
    elif position == "sender_name":
        [sender] = message["From"].addresses
        assert sender.addr_spec == "noreply@shop.example"
        assert wire_check.display_name(data) == clean_line(value)
    elif position == "text_field":
        body = message.get_body(("plain",)).get_content().replace("\r\n", "\n")
        assert body.rstrip("\n") == clean_text("Hi " + clean_text(value)).rstrip("\n")
    else:
        html = message.get_body(("html",)).get_content()
        assert "<script>" not in html  # substituted values are HTML-escaped
        assert "<p>" in html


# --- fuzzing through the real server ------------------------------------------------------------

VALUES_STRATEGY = st.fixed_dictionaries(
    {
        "subject": header_values,
        "name": st.none() | header_values,
        "field": header_values,
        "body": header_values,
    }
)


@given(values=VALUES_STRATEGY)
@example(values={"subject": "=?UTF-8?Q?=0A?=Bcc: x@y", "name": None, "field": "", "body": ""})
@example(
    values={
        "subject": "Hi\r\n",
        "name": "Eve\r\nBcc: x@y",
        "field": "\r\nBcc: x@y",
        "body": "\r\n.\r\nRSET",
    }
)
@example(
    values={"subject": "x" * 990, "name": '"<eve@evil.example>"', "field": "é" * 200, "body": "."}
)
def test_fuzzed_header_values_through_a_real_smtp_server(wire, wire_check, values):
    name = values["name"]
    message = {
        "to": GOOD,
        "subject": values["subject"].replace("$", "$$") + " $v",
        "text": values["body"].replace("$", "$$") + "\n$v",
        "v": values["field"],
    }
    if name is not None:
        message["sender_name"] = name
    outcome, received, commands = wire.send(message)
    assert isinstance(outcome, Outcome), f"the handler raised {outcome!r}"
    try:
        # What enqueue checks (email_message): the JSON rules, then the e-mail rules.
        intended = EmailPayload.from_payload(validate_payload(message))
    except InvalidMessage:
        event("refused: nothing reached the server")
        assert outcome.kind is OutcomeKind.PERMANENT
        assert received == []
        assert not commands
        return
    # What enqueue accepts, the send must deliver: a refusal here would fail a valid message.
    assert outcome.kind is OutcomeKind.SENT, outcome.reason
    event("accepted: delivered")
    [mail] = received
    delivered = wire_check.delivered(mail, recipients=[GOOD])
    want_subject, want_text, _ = intended.render()
    assert str(delivered["Subject"]) == want_subject
    assert wire_check.display_name(mail.data) == ("" if name is None else clean_line(name))
    body = delivered.get_body(("plain",)).get_content().replace("\r\n", "\n")
    assert body.rstrip("\n") == want_text.rstrip("\n")
    assert commands == {"MAIL": 1, "RCPT": 1, "DATA": 1}
