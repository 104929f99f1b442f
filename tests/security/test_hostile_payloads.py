"""Hostile payloads (RELIABILITY.md, hostile input: "Payloads").

Promise: a payload that is not JSON, not an object, huge, missing a required field, or whose
templates use a field it doesn't have is refused at enqueue with a clear error the caller can catch
(``InvalidPayload`` naming the problem); a row that can't be decoded at send time (written around
enqueue: a buggy producer, an old row) fails at once, permanently, with the reason, and is never
retried; not one SMTP command goes out for it, and the rows around it are sent as usual.

Mechanisms under test: ``outbox_core.payload`` (``validate_payload`` at enqueue, ``EmailPayload``
at enqueue and again in ``EmailHandler`` at send), and the worker's mapping of ``InvalidMessage``
to a permanent outcome. Remove the send-time check and the raw rows below reach the server or
crash the handler (transient, retried for days); remove the enqueue check and the enqueue tests
below stop raising.
"""

from __future__ import annotations

import json
import math
import re
from datetime import UTC, datetime

import psycopg
import pytest

from outbox_adapters.postgres import MAX_PAYLOAD_BYTES, enqueue_async
from outbox_core.errors import InvalidMessage, InvalidPayload
from outbox_core.messages import NewMessage

pytestmark = pytest.mark.integration

GOOD = "ann@example.org"


# --- at enqueue ------------------------------------------------------------------------------

ENQUEUE_REFUSALS = [
    # (id, email_message keyword arguments, the words the error must contain)
    ("not-json-set", {"fields": {"ids": {1, 2}}}, "payload['ids'] is a set"),
    ("not-json-bytes", {"fields": {"pdf": b"%PDF"}}, "payload['pdf'] is a bytes"),
    ("not-json-datetime", {"fields": {"at": datetime.now(UTC)}}, "payload['at'] is a datetime"),
    ("not-json-nan", {"fields": {"amount": math.nan}}, "nan, which JSON cannot represent"),
    ("not-json-key", {"fields": {"n": {1: "x"}}}, "has a int key"),
    ("not-json-nul", {"fields": {"name": "a\x00b"}}, "U+0000"),
    ("not-json-surrogate", {"fields": {"name": "a\ud800b"}}, "U+D800"),
    ("huge", {"fields": {"blob": "x" * 300_000}}, "bytes as JSON; the limit is 262,144 bytes"),
    ("deep", {"fields": {"tree": json.loads("[" * 100 + "]" * 100)}}, "nests deeper than 64"),
    ("no-recipient", {"to": []}, "names no recipient"),
    ("subject-not-text", {"subject": 42}, "'subject' must be a string, not int"),
    ("text-not-text", {"text": ["a"]}, "'text' must be a string, not list"),
    ("html-not-text", {"html": {"b": 1}}, "'html' must be a string, not dict"),
    (
        "unknown-placeholder",
        {"text": "Reset: $reset_link"},
        "uses $reset_link, but the payload has no such",
    ),
    ("unknown-in-subject", {"subject": "Hi ${name}"}, "uses $name"),
    ("unknown-in-html", {"html": "<a href='$url'>x</a>"}, "uses $url"),
    ("non-text-field", {"text": "$n", "fields": {"n": 5}}, "uses $n"),
    ("stray-dollar", {"text": "Pay $5 now"}, "has a '$' that starts no placeholder"),
    ("too-many-recipients", {"to": [f"u{i}@example.org" for i in range(101)]}, "the limit is 100"),
]
ENQUEUE_REFUSAL_PARAMS = [pytest.param(*case[1:], id=case[0]) for case in ENQUEUE_REFUSALS]


@pytest.mark.parametrize(("kwargs", "words"), ENQUEUE_REFUSAL_PARAMS)
def test_enqueue_refuses_a_bad_payload_naming_the_problem(pipeline, kwargs, words):
    kwargs = {"to": GOOD, **kwargs}
    with pytest.raises(InvalidMessage) as refused:
        pipeline.email(**kwargs)
    assert words in str(refused.value)


@pytest.mark.parametrize("to", [42, None, 4.5], ids=["int", "none", "float"])
def test_enqueue_refuses_a_recipient_of_the_wrong_type_with_an_invalid_message(pipeline, to):
    # Once a bare TypeError from list(to): a host catching InvalidMessage around enqueue crashed.
    with pytest.raises(InvalidMessage, match="'to'"):
        pipeline.email(to=to)


@pytest.mark.parametrize("key", ["reply_to", "sender_name", "html", "subject", "text", "to"])
def test_enqueue_refuses_a_template_field_named_like_a_message_part(pipeline, key):
    # The payload is flat ({**fields, to, subject, text, ...}): a reserved key in `fields` would
    # set the Reply-To, the From display name or the HTML body (user-supplied template variables
    # letting the user set Reply-To: phishing).
    with pytest.raises(InvalidPayload, match=key):
        pipeline.email(to=GOOD, fields={key: "eve@evil.example"})


async def test_enqueue_refuses_a_payload_that_is_not_an_object(dsn):
    async with await psycopg.AsyncConnection.connect(dsn) as conn, conn.transaction():
        for bad in (["a list"], "text", 42, None):
            with pytest.raises((InvalidPayload, TypeError), match=r"mapping|JSON object"):
                await enqueue_async(conn, NewMessage("email", bad))  # type: ignore[arg-type]
        # The stores' limit is the whole payload's, files included (the e-mail helper holds the
        # rest of a message to 256 KiB: see the "huge" case above).
        huge = {"blob": "x" * (MAX_PAYLOAD_BYTES + 1)}
        with pytest.raises(InvalidPayload, match="bytes as JSON"):
            await enqueue_async(conn, NewMessage("email", huge))


# --- at send: rows written around enqueue --------------------------------------------------------

# (id, the payload as JSON text, words the permanent reason must contain)
UNDECODABLE = [
    ("missing-to", '{"subject": "Hi", "text": "Hi"}', "has no 'to' field"),
    ("missing-subject-text", '{"to": "ann@example.org"}', "has no 'subject', 'text' field"),
    ("to-number", '{"to": 42, "subject": "Hi", "text": "Hi"}', "'to' must be an address or a list, not int"),
    ("to-object", '{"to": {"a": 1}, "subject": "Hi", "text": "Hi"}', "not dict"),
    ("to-empty", '{"to": [], "subject": "Hi", "text": "Hi"}', "names no recipient"),
    ("to-list-number", '{"to": ["ann@example.org", 7], "subject": "Hi", "text": "Hi"}', "type int"),
    ("to-nested", '{"to": [["ann@example.org"]], "subject": "Hi", "text": "Hi"}', "type list"),
    ("to-101", json.dumps({"to": [f"u{i}@example.org" for i in range(101)], "subject": "Hi", "text": "Hi"}), "the limit is 100"),
    ("subject-null", '{"to": "ann@example.org", "subject": null, "text": "Hi"}', "'subject' must be a string"),
    ("text-object", '{"to": "ann@example.org", "subject": "Hi", "text": {}}', "'text' must be a string"),
    ("missing-field", '{"to": "ann@example.org", "subject": "Hi", "text": "Go: $password_reset_url"}', "uses $password_reset_url"),
    ("field-not-text", '{"to": "ann@example.org", "subject": "Hi", "text": "$n", "n": 5}', "uses $n"),
    ("stray-dollar", '{"to": "ann@example.org", "subject": "Hi", "text": "Pay $5"}', "starts no placeholder"),
    ("sender-name-number", '{"to": "ann@example.org", "subject": "Hi", "text": "Hi", "sender_name": 1}', "'sender_name' must be a string"),
    ("reply-to-number", '{"to": "ann@example.org", "subject": "Hi", "text": "Hi", "reply_to": 1}', "type int"),
    ("huge-subject", json.dumps({"to": GOOD, "subject": "s" * 5000, "text": "Hi"}), "the limit is 998"),
]  # fmt: skip


async def test_undecodable_rows_fail_at_once_and_are_never_retried(pipeline):
    bad = {pipeline.insert_raw(text): (name, words) for name, text, words in UNDECODABLE}
    [good] = await pipeline.enqueue(pipeline.email(to=GOOD))

    stats = await pipeline.drain()
    await pipeline.drain()  # a second worker pass finds nothing to retry

    rows = pipeline.rows()
    for row_id, (name, words) in bad.items():
        row = rows[row_id]
        assert (row["status"], row["attempts"]) == ("failed", 1), (name, row["last_error"])
        assert row["last_error"].startswith("undeliverable: "), name
        assert words in row["last_error"], (name, row["last_error"])
        assert row["resolved_at"] is not None
    assert rows[good]["status"] == "dispatched"
    assert (stats.failed, stats.dispatched, stats.retried, stats.handler_errors) == (
        len(bad),
        1,
        0,
        0,
    )
    # Not one command for the undecodable rows: the only transaction is the good row's.
    assert dict(pipeline.sink.handler.commands) == {"MAIL": 1, "RCPT": 1, "DATA": 1}


@pytest.mark.parametrize(
    "text",
    [
        pytest.param('["ann@example.org"]', id="array"),
        # `payload - keys` raises for a JSON string, number or null ('cannot delete from
        # scalar'), even with no keys: the MARK only subtracts keys from an object, and the
        # worker's mark never raises into the batch.
        pytest.param('"to: ann@example.org"', id="string"),
        pytest.param("42", id="number"),
        pytest.param("null", id="null"),
    ],
)  # fmt: skip
async def test_a_stored_payload_that_is_not_an_object_fails_at_once(pipeline, store, text):
    bad = pipeline.insert_raw(text)
    [good] = await pipeline.enqueue(pipeline.email(to=GOOD))

    mailer = pipeline.mailer()
    async with mailer:
        report = await pipeline.worker(store, mailer).run_once()

    rows = pipeline.rows()
    assert (rows[bad]["status"], rows[bad]["attempts"]) == ("failed", 1), rows[bad]["last_error"]
    assert re.search(r"JSON object|JSON text or a mapping|not valid JSON", rows[bad]["last_error"])
    assert rows[good]["status"] == "dispatched"
    assert (report.failed, report.dispatched, report.handler_errors) == (1, 1, 0)
    assert dict(pipeline.sink.handler.commands) == {"MAIL": 1, "RCPT": 1, "DATA": 1}


# A row PostgreSQL stores happily but psycopg cannot turn into Python while claiming it: nesting
# deeper than the interpreter's recursion limit, or an integer longer than int max_str_digits.
POISON = [
    ("deep-array", '{"to": "ann@example.org", "subject": "Hi", "text": "Hi", "x": ' + "[" * 3000 + "]" * 3000 + "}"),
    ("huge-integer", '{"to": "ann@example.org", "subject": "Hi", "text": "Hi", "n": ' + "9" * 5000 + "}"),
]  # fmt: skip


@pytest.mark.parametrize("text", [p[1] for p in POISON], ids=[p[0] for p in POISON])
async def test_a_payload_the_driver_cannot_decode_fails_alone(pipeline, store, text):
    # Decoded inside the claim (psycopg's jsonb loader), such a row once made EVERY claim of its
    # lane raise and roll back: never marked, first in line, blocking the lane for ever. The claim
    # now fetches the text and decodes row by row; the worker fails the row it can't decode.
    poison = pipeline.insert_raw(text)
    [good] = await pipeline.enqueue(pipeline.email(to=GOOD))

    mailer = pipeline.mailer()
    async with mailer:
        worker = pipeline.worker(store, mailer)
        report = await worker.run_once()

    with psycopg.connect(pipeline.dsn) as conn:  # not SELECT *: the payload can't be decoded
        found = conn.execute(
            "SELECT id, status, attempts FROM outbox_message WHERE lane = %s", (pipeline.lane,)
        ).fetchall()
    states = {row_id: (status, attempts) for row_id, status, attempts in found}
    assert report.claimed == 2
    assert states[poison] == ("failed", 1)
    assert states[good] == ("dispatched", 1)
    assert (report.failed, report.dispatched, report.handler_errors) == (1, 1, 0)


async def test_a_payload_the_driver_cannot_decode_never_reaches_the_server(pipeline, store):
    """Nothing is sent for a poison row, and each fails at once with the reason."""
    for _, text in POISON:
        pipeline.insert_raw(text)
    mailer = pipeline.mailer()
    async with mailer:
        worker = pipeline.worker(store, mailer)
        await worker.run_once()
    assert dict(pipeline.sink.handler.commands) == {}
    with psycopg.connect(pipeline.dsn) as conn:  # not SELECT *: the payloads can't be decoded
        statuses = conn.execute(
            "SELECT status FROM outbox_message WHERE lane = %s", (pipeline.lane,)
        ).fetchall()
    assert statuses
    assert {status for (status,) in statuses} <= {"pending", "failed"}
