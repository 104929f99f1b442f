"""Hostile attachment filenames and content types, end to end (RELIABILITY.md, hostile input).

Promise: whatever an attachment's filename or content type holds (CR/LF, other controls, a path,
bidirectional-text controls, an RFC 2047 encoded word, parameters after a ';', a composite type), no
extra header or part ever reaches the server, and the file that does arrive carries exactly the
intended name, type and bytes. Checked on the exact bytes the real SMTP server received,
re-parsed with the standard library.

Mechanisms under test: the rules of ``outbox_core.mail.attachments`` (applied by ``email_message``
at enqueue and by ``EmailHandler`` again at send, on rows written around enqueue), the library's
own RFC 2231 writing of the filename parameter, and ``build_message``'s re-parse of its own bytes.
"""

from __future__ import annotations

import base64

import pytest
from hypothesis import event, example, given
from hypothesis import strategies as st

from outbox_core.errors import InvalidMessage, UnsafeHeader
from outbox_core.mail import Attachment
from outbox_core.outcomes import Outcome, OutcomeKind

pytestmark = pytest.mark.integration

GOOD = "ann@example.org"
PDF = b"%PDF-1.4\n" + bytes(range(256)) + b"\n%%EOF\n"
PART_HEADERS = ["content-disposition", "content-transfer-encoding", "content-type"]

# (id, filename, what the refusal names)
HOSTILE_NAMES = [
    ("crlf-bcc", "a.pdf\r\nBcc: eve@evil.example", "control character"),
    ("lf-header", "a.pdf\nContent-Type: text/html", "control character"),
    ("crlf-crlf-part", "a.pdf\r\n\r\n--boundary\r\nContent-Type: text/html", "control character"),
    ("cr", "a.pdf\rX-Evil: 1", "control character"),
    ("nul", "a\x00.pdf", "control character"),
    ("nel", "a\x85Bcc: x@y", "control character"),
    ("line-separator", "a\u2028Bcc: x@y", "control character"),
    ("rtl-override", "invoice\u202efdp.exe", "bidirectional control"),
    ("path", "../../../etc/cron.d/evil", "path separator"),
    ("windows-path", "C:\\Windows\\evil.exe", "path separator"),
    ("dotdot", "..", "'\\.\\.'"),
    ("encoded-word-q", "=?UTF-8?Q?a=0D=0ABcc:_x@y?=", "encoded word"),
    ("encoded-word-b", "=?utf-8?b?CkJjYzogZXZlQGV2aWwuZXhhbXBsZQ==?=.pdf", "encoded word"),
    ("huge", "a" * 100_000, "the limit is 255"),
]
HOSTILE_TYPES = [
    ("param-injection", "application/pdf; name=evil.exe", "no parameters"),
    ("crlf-type", "application/pdf\r\nBcc: eve@evil.example", "bare 'type/subtype'"),
    ("boundary-type", 'multipart/mixed; boundary="x"', "bare 'type/subtype'"),
    ("multipart", "multipart/mixed", "multipart/\\*"),
    ("message", "message/rfc822", "message/\\*"),
]
# Names that must go through, exactly.
ODD_NAMES = [
    ("unicode", "Rechnung Grüße € 請求書.pdf"),
    ("quotes", 'say "hi" now.pdf'),
    ("semicolons", "a; filename=evil.exe.pdf"),
    ("percent", "100% done %0D%0A.pdf"),
    ("long-unicode", "é" * 127 + "a"),
    ("boundary-like", "--=_outbox_mixed_0123.pdf"),
    ("half-encoded-word", "=?utf-8?q?no end.pdf"),
]


@pytest.mark.parametrize(
    ("filename", "why"), [c[1:] for c in HOSTILE_NAMES], ids=[c[0] for c in HOSTILE_NAMES]
)
def test_enqueue_refuses_a_hostile_filename(pipeline, filename: str, why: str) -> None:
    with pytest.raises(UnsafeHeader, match=f"attachment 1: .*{why}"):
        pipeline.email(to=GOOD, attachments=[(filename, "application/pdf", PDF)])


@pytest.mark.parametrize(
    ("content_type", "why"), [c[1:] for c in HOSTILE_TYPES], ids=[c[0] for c in HOSTILE_TYPES]
)
def test_enqueue_refuses_a_hostile_content_type(pipeline, content_type: str, why: str) -> None:
    with pytest.raises(UnsafeHeader, match=f"attachment 1: .*{why}"):
        pipeline.email(to=GOOD, attachments=[("a.pdf", content_type, PDF)])


def _raw(filename: str, content_type: str, content: str | None = None) -> dict[str, object]:
    return {
        "to": GOOD,
        "subject": "Invoice",
        "text": "Attached.",
        "attachments": [
            {
                "filename": filename,
                "content_type": content_type,
                "content": base64.b64encode(PDF).decode() if content is None else content,
            }
        ],
    }


async def test_no_hostile_file_reaches_the_server_and_odd_names_arrive_exactly(
    pipeline, wire_check
) -> None:
    # Written around enqueue (a foreign producer): the send must refuse each, at once.
    refused = {
        pipeline.insert_raw(_raw(name, "application/pdf")): case
        for case, name, _ in HOSTILE_NAMES
        if "\x00" not in name  # jsonb cannot even store U+0000
    }
    refused |= {
        pipeline.insert_raw(_raw("a.pdf", content_type)): case
        for case, content_type, _ in HOSTILE_TYPES
    }
    refused[pipeline.insert_raw(_raw("a.pdf", "application/pdf", "JVBE\r\nRi0x"))] = "base64-crlf"
    ids = await pipeline.enqueue(
        *(
            pipeline.email(to=GOOD, subject=case, attachments=[(name, "application/pdf", PDF)])
            for case, name in ODD_NAMES
        )
    )
    accepted = dict(zip(ids, ODD_NAMES, strict=True))

    await pipeline.drain()

    rows = pipeline.rows()
    by_row = pipeline.received_by_row()
    for row_id, case in refused.items():
        row = rows[row_id]
        assert (row["status"], row["attempts"]) == ("failed", 1), case
        assert row["last_error"].startswith("undeliverable: attachment 1: "), case
        assert row_id not in by_row, case
    for row_id, (case, name) in accepted.items():
        row = rows[row_id]
        assert row["status"] == "dispatched", (case, row["last_error"])
        assert "attachments" not in row["payload"], case  # scrubbed with the mark
        [mail] = by_row[row_id]
        message = wire_check.delivered(mail, recipients=[GOOD], multipart=True)
        assert [p.get_content_type() for p in message.walk()] == [
            "multipart/mixed",
            "text/plain",
            "application/pdf",
        ]
        [part] = message.iter_attachments()
        assert sorted(key.lower() for key in part) == PART_HEADERS, case
        assert part.get_filename() == name, case
        assert part.get_payload(decode=True) == PDF, case
        for value in part.values():
            assert "\r" not in str(value)
            assert "\n" not in str(value)
    n = len(accepted)
    assert dict(pipeline.sink.handler.commands) == {"MAIL": n, "RCPT": n, "DATA": n}


# --- fuzzing through the real server ------------------------------------------------------------

_BITS = [
    "\r\n", "\r", "\n", "\x00", "\x0b", "\x1b", "\x7f", "\x85", "\u2028", "\u202e", "\u2066",
    "\t", " ", "/", "\\", ".", "..", '"', "'", ";", "=", "%", "*", "=?", "?=", "?Q?",
    "=?utf-8?q?=0A?=", "Bcc: eve@evil.example", "filename=evil.exe", "--=_outbox_mixed_",
    "é", "€", "😀", "請", "\u200b", "\ufeff",
]  # fmt: skip
FILENAMES = st.one_of(
    st.text(max_size=40),
    st.lists(st.one_of(st.sampled_from(_BITS), st.text(max_size=6)), max_size=10).map("".join),
    st.builds(lambda n, tail: "é" * n + tail, st.integers(120, 130), st.sampled_from(["", "a"])),
)


@given(filename=FILENAMES, content=st.binary(max_size=300))
@example(filename="a.pdf\r\nBcc: eve@evil.example", content=b"")
@example(filename="\u202efdp.exe", content=b"x")
@example(filename='"; filename="evil.exe', content=b"\r\n.\r\n")
def test_fuzzed_filenames_through_a_real_smtp_server(wire, wire_check, filename, content):
    payload = _raw(filename, "application/octet-stream", base64.b64encode(content).decode())
    outcome, received, commands = wire.send(payload)
    assert isinstance(outcome, Outcome), f"the handler raised {outcome!r}"
    try:
        Attachment(filename, "application/octet-stream", content)
    except InvalidMessage:
        event("refused: nothing reached the server")
        assert outcome.kind is OutcomeKind.PERMANENT
        assert outcome.reason is not None
        # "attachment 1: ...", or the JSON rules' "payload['attachments'][0]..." for U+0000.
        assert outcome.reason.startswith("undeliverable: ")
        assert "attachment" in outcome.reason
        assert received == []
        assert not commands
        return
    event("accepted: delivered")
    assert outcome.kind is OutcomeKind.SENT, outcome.reason
    [mail] = received
    message = wire_check.delivered(mail, recipients=[GOOD], multipart=True)
    [part] = message.iter_attachments()
    assert sorted(key.lower() for key in part) == PART_HEADERS
    assert part.get_filename() == filename
    assert part.get_payload(decode=True) == content
    assert commands == {"MAIL": 1, "RCPT": 1, "DATA": 1}
