"""Sealed payload fields end to end (catalogue B1): real PostgreSQL, a real SMTP server (STARTTLS).

What it promises, each read back from the raw stored row (``payload::text``) and from the exact
bytes the SMTP server received:

- a pending or failed row holds no plaintext secret, only ``{"$sealed": "v1", "kid": ...}``;
- the mail the server receives carries the link (opened at send time, in memory);
- once the row is dispatched or skipped the field is gone (the scrub removes it by name);
- a failed row keeps its sealed field, so a requeue still sends a complete message;
- a row sealed under an old key still sends after the active key changed (the old key opens it);
- ``outbox keys rotate`` re-seals unsent rows under the active key in batches (one transaction
  each), never over a row a worker marked meanwhile, after which the old key can be dropped;
- a key that is not configured fails the row at once, naming the field and the key id.
"""

from __future__ import annotations

import base64
import json
import re
import secrets
from datetime import timedelta
from email import message_from_bytes, policy
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner, Result
from tests.support.postgres import enqueue_all
from tests.support.smtp import SENDER, settings_for

from outbox_adapters.cli import main
from outbox_adapters.clock import SystemClock
from outbox_adapters.crypto import AesGcmEncryptor, format_key_entry, generate_key
from outbox_adapters.demo.sink import SmtpSink
from outbox_adapters.lanes.email import EmailHandler, email_lane, email_message
from outbox_adapters.postgres import PostgresStore, enqueue, outbox_message, statements
from outbox_adapters.runtime import Worker
from outbox_adapters.smtp import SmtpMailer
from outbox_core.backoff import SlotSchedule
from outbox_core.messages import ClaimToken, NewMessage
from outbox_core.ports import ClaimRequest, Encryptor, RequeueRequest
from outbox_core.sealing import reseal

pytestmark = pytest.mark.integration

TOKEN = f"canary-{secrets.token_hex(8)}"
LINK = f"https://shop.example/reset?token={TOKEN}"
K1, K2 = generate_key(), generate_key()
OLD = AesGcmEncryptor({"k1": K1}, active="k1")
ROTATED = AesGcmEncryptor({"k2": K2, "k1": K1}, active="k2")
NEW_ONLY = AesGcmEncryptor({"k2": K2}, active="k2")


def handler_for(sink: SmtpSink, encryptor: Encryptor | None, **kwargs: Any) -> EmailHandler:
    return EmailHandler(
        SmtpMailer(settings_for(sink)),
        sender=SENDER,
        clock=SystemClock(),
        encryptor=encryptor,
        **kwargs,
    )


async def drain(store: PostgresStore, lane: str, handler: EmailHandler) -> None:
    config = email_lane(
        lane=lane, poll_interval=0.05, backoff=SlotSchedule((timedelta(minutes=1),))
    )
    try:
        await Worker(store, handler, config, clock=SystemClock()).run(drain=True)
    finally:
        mailer = handler.mailer
        assert isinstance(mailer, SmtpMailer)
        await mailer.aclose()  # the mailer may keep its SMTP session open for reuse


def sealed_message(to: str, lane: str, encryptor: Encryptor) -> NewMessage:
    return email_message(
        to=to,
        subject="Reset your password",
        text="Hello, reset it here: $password_reset_url",
        fields={"password_reset_url": LINK, "customer": "c-1"},
        lane=lane,
        encryptor=encryptor,
    )


async def enqueue_sealed(dsn: str, lane: str, encryptor: Encryptor, *recipients: str) -> list[int]:
    return await enqueue_all(dsn, [sealed_message(to, lane, encryptor) for to in recipients])


def stored(dsn: str, lane: str) -> dict[int, dict[str, Any]]:
    """Every row of the lane as PostgreSQL holds it: the payload's raw text, not a decoded view."""
    with psycopg.connect(dsn) as conn:
        found = conn.execute(
            "SELECT id, status, attempts, last_error, payload::text, updated_at"
            " FROM outbox_message WHERE lane = %s ORDER BY id",
            (lane,),
        ).fetchall()
    return {
        row_id: {
            "status": status,
            "attempts": attempts,
            "last_error": last_error,
            "raw": raw,
            "payload": json.loads(raw),
            "updated_at": updated_at,
        }
        for row_id, status, attempts, last_error, raw, updated_at in found
    }


def assert_sealed(row: dict[str, Any], kid: str) -> None:
    assert TOKEN not in row["raw"]  # no plaintext secret at rest
    envelope = row["payload"]["password_reset_url"]
    assert set(envelope) == {"$sealed", "kid", "n", "ct"}
    assert (envelope["$sealed"], envelope["kid"]) == ("v1", kid)
    assert row["payload"]["customer"] == "c-1"  # not a secret field: readable as before


def assert_scrubbed(row: dict[str, Any]) -> None:
    assert "password_reset_url" not in row["payload"]
    assert "$sealed" not in row["raw"]
    assert row["payload"]["customer"] == "c-1"


def bodies(sink: SmtpSink) -> dict[str, str]:
    """Recipient → the text body exactly as the server received it, decoded."""
    found = {}
    for mail in sink.received:
        content = message_from_bytes(mail.data, policy=policy.default).get_content()
        found.update(dict.fromkeys(mail.recipients, content))
    return found


# --- the pipeline ---------------------------------------------------------------------------------


async def test_unsent_rows_hold_only_ciphertext_and_the_mail_carries_the_link(
    dsn: str, lane: str, store: PostgresStore, sink: SmtpSink
) -> None:
    # Mechanisms: sealing in email_message (else the raw row shows the token), opening in the
    # handler (else the template has no string field and the row fails), the scrub by key name.
    ann, opted_out, bounce = await enqueue_sealed(
        dsn, lane, OLD, "ann@example.org", "opted-out@example.org", "bounce@example.org"
    )
    before = stored(dsn, lane)
    for row_id in (ann, opted_out, bounce):
        assert before[row_id]["status"] == "pending"
        assert_sealed(before[row_id], "k1")

    handler = handler_for(
        sink, OLD, suppressed=lambda to: [address for address in to if address.startswith("opted")]
    )
    await drain(store, lane, handler)

    assert bodies(sink) == {"ann@example.org": bodies(sink)["ann@example.org"]}
    assert LINK in bodies(sink)["ann@example.org"]  # opened in memory, rendered into the mail
    assert all(mail.tls for mail in sink.received)
    after = stored(dsn, lane)
    assert after[ann]["status"] == "dispatched"
    assert_scrubbed(after[ann])  # gone once sent: the scrub removes the sealed field by name
    # A suppressed recipient fails the row at once (ADR 0015); a failed row keeps its sealed field.
    assert after[opted_out]["status"] == "failed"
    assert after[opted_out]["last_error"] == "recipient opted-out@example.org is suppressed"
    assert_sealed(after[opted_out], "k1")
    assert after[bounce]["status"] == "failed"
    assert "550" in after[bounce]["last_error"]
    assert_sealed(after[bounce], "k1")  # a failed row keeps its (sealed) field
    with psycopg.connect(dsn) as conn:  # the whole table, as a dump would show it
        [(hits,)] = conn.execute(
            "SELECT count(*) FROM outbox_message WHERE payload::text LIKE %s", (f"%{TOKEN}%",)
        ).fetchall()
    assert hits == 0


@pytest.mark.parametrize(
    ("worker_keys", "reason"),
    [
        (NEW_ONLY, "cannot decrypt field 'password_reset_url': key id 'k1' is not configured"),
        (
            None,
            (
                "cannot decrypt field 'password_reset_url': it is sealed under key id 'k1' and no"
                " encryption keys are configured"
            ),
        ),
    ],
)
async def test_a_missing_key_fails_at_once_naming_it_and_a_requeue_sends_once_it_is_back(  # noqa: PLR0917 - fixtures
    dsn: str, lane: str, store: PostgresStore, sink: SmtpSink, worker_keys, reason
) -> None:
    [row_id] = await enqueue_sealed(dsn, lane, OLD, "ann@example.org")

    await drain(store, lane, handler_for(sink, worker_keys))

    row = stored(dsn, lane)[row_id]
    assert (row["status"], row["attempts"]) == ("failed", 1)  # at once, not retried for days
    assert row["last_error"] == f"undeliverable: {reason}"  # as every refusal of a row's content
    assert sink.received == []
    assert_sealed(row, "k1")  # kept whole for the requeue

    result = await store.requeue_failed(RequeueRequest(actor="ops", row_ids=(row_id,)))
    assert result.requeued == (row_id,)
    await drain(store, lane, handler_for(sink, ROTATED))

    assert LINK in bodies(sink)["ann@example.org"]
    assert stored(dsn, lane)[row_id]["status"] == "dispatched"
    assert_scrubbed(stored(dsn, lane)[row_id])


async def test_a_row_sealed_under_the_old_key_sends_after_the_active_key_changed(
    dsn: str, lane: str, store: PostgresStore, sink: SmtpSink
) -> None:
    [old_row] = await enqueue_sealed(dsn, lane, OLD, "ann@example.org")
    [new_row] = await enqueue_sealed(dsn, lane, ROTATED, "bob@example.org")
    assert_sealed(stored(dsn, lane)[new_row], "k2")  # new rows go under the new active key

    await drain(store, lane, handler_for(sink, ROTATED))

    received = bodies(sink)
    assert LINK in received["ann@example.org"]
    assert LINK in received["bob@example.org"]
    assert {stored(dsn, lane)[i]["status"] for i in (old_row, new_row)} == {"dispatched"}


async def test_a_ciphertext_copied_into_another_lane_does_not_open(
    dsn: str, lane: str, store: PostgresStore, sink: SmtpSink
) -> None:
    # Mechanism: the lane and field name are the associated data (sealing.field_aad).
    [source] = await enqueue_sealed(dsn, f"{lane}-x", OLD, "eve@example.org")
    [target] = await enqueue_sealed(dsn, lane, OLD, "ann@example.org")
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "UPDATE outbox_message SET payload = jsonb_set(payload, '{password_reset_url}',"
            " (SELECT payload->'password_reset_url' FROM outbox_message WHERE id = %s))"
            " WHERE id = %s",
            (source, target),
        )

    await drain(store, lane, handler_for(sink, OLD))

    row = stored(dsn, lane)[target]
    assert row["status"] == "failed"
    assert row["last_error"].startswith(
        "undeliverable: cannot decrypt field 'password_reset_url': the value does not authenticate"
        " under key id"
    )
    assert sink.received == []


# --- rotation -------------------------------------------------------------------------------------


def outbox(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def enqueue_sealed_sync(dsn: str, lane: str, encryptor: Encryptor, *recipients: str) -> list[int]:
    with psycopg.connect(dsn) as conn, conn.transaction():
        return [int(enqueue(conn, sealed_message(to, lane, encryptor)).row_id) for to in recipients]


def run_worker(dsn: str, lane: str, sink: SmtpSink, *keys: str, env: dict[str, str]) -> Result:
    return outbox(
        "worker", "--drain", "--database-url", dsn, "--lane", lane,
        "--smtp-url", f"smtp://{sink.host}:{sink.port}", "--smtp-ca-file", str(sink.ca_file),
        "--sender", SENDER, "--poll-interval", "0.1", *keys, env=env,
    )  # fmt: skip


def test_keys_rotate_reseals_unsent_rows_in_batches_and_then_the_old_key_can_go(
    dsn: str, lane: str, sink: SmtpSink, tmp_path
) -> None:
    generated = outbox("keys", "generate", "k2")
    assert generated.exit_code == 0, generated.output
    new_entry = generated.stdout.strip()
    assert len(base64.b64decode(new_entry.removeprefix("k2:"), validate=True)) == 32
    old_entry = format_key_entry("k1", K1)

    # A sent row and a failed row first, then seven pending ones (one through `outbox enqueue`).
    sent, failed = enqueue_sealed_sync(dsn, lane, OLD, "ann@example.org", "bounce@example.org")
    first = run_worker(dsn, lane, sink, env={"OUTBOX_ENCRYPTION_KEYS": old_entry})
    assert first.exit_code == 0, first.output
    assert "sealed fields: key 'k1' seals" in first.stdout
    pending = enqueue_sealed_sync(dsn, lane, OLD, *(f"user{n}@example.org" for n in range(6)))
    enqueued = outbox(
        "enqueue", "email", "--database-url", dsn, "--lane", lane, "--to", "cli@example.org",
        "--subject", "Reset", "--text", "Reset here: $password_reset_url",
        "--field", f"password_reset_url={LINK}", "--field", "customer=c-1",
        env={"OUTBOX_ENCRYPTION_KEYS": old_entry},
    )  # fmt: skip
    assert enqueued.exit_code == 0, enqueued.output
    enqueued_as = re.fullmatch(r"enqueued as (\d+)", enqueued.stdout.strip())
    assert enqueued_as is not None, enqueued.stdout
    pending.append(int(enqueued_as.group(1)))
    before = stored(dsn, lane)
    for row_id in (failed, *pending):
        assert_sealed(before[row_id], "k1")

    rotated = outbox(
        "keys", "rotate", "--database-url", dsn, "--lane", lane, "--batch-size", "3",
        env={"OUTBOX_ENCRYPTION_KEYS": f"{new_entry},{old_entry}"},
    )  # fmt: skip

    assert rotated.exit_code == 0, rotated.output
    assert rotated.stdout.startswith(
        "re-sealed 8 row(s) under key 'k2' (8 unsent row(s) read in 3 batch(es) of at most 3)"
    )
    after = stored(dsn, lane)
    for row_id in (failed, *pending):
        assert_sealed(after[row_id], "k2")
    assert after[sent] == before[sent]  # a sent row is not touched (it has nothing sealed)
    # One transaction per batch: PostgreSQL's now() is the transaction's start, so the eight
    # rewritten rows carry exactly three distinct updated_at values (3 + 3 + 2).
    assert len({after[row_id]["updated_at"] for row_id in (failed, *pending)}) == 3
    again = outbox(
        "keys", "rotate", "--database-url", dsn, "--lane", lane,
        env={"OUTBOX_ENCRYPTION_KEYS": f"{new_entry},{old_entry}"},
    )  # fmt: skip
    assert again.stdout.startswith("re-sealed 0 row(s) under key 'k2'")

    # The old key is gone from the worker's keys, and every pending row still sends.
    keys_file = tmp_path / "keys"
    keys_file.write_text(f"# rotated\n{new_entry}\n")
    worker = run_worker(dsn, lane, sink, "--encryption-keys-file", str(keys_file), env={})
    assert worker.exit_code == 0, worker.output
    assert "sealed fields: key 'k2' seals" in worker.stdout
    assert new_entry.removeprefix("k2:") not in worker.output  # key material is never printed
    received = bodies(sink)
    for n in range(6):
        assert LINK in received[f"user{n}@example.org"]
    assert LINK in received["cli@example.org"]
    final = stored(dsn, lane)
    for row_id in pending:
        assert final[row_id]["status"] == "dispatched"
        assert_scrubbed(final[row_id])
    assert final[failed]["status"] == "failed"
    assert_sealed(final[failed], "k2")


async def test_rotation_never_writes_back_over_a_row_a_worker_marked_meanwhile(
    dsn: str, lane: str, store: PostgresStore
) -> None:
    # Mechanism: the compare-and-set on the payload digest in operator_statements.REWRITE_PAYLOADS.
    # Without it, the secret the dispatched mark scrubbed would be written back into a sent row.
    marked, other = await enqueue_sealed(dsn, lane, OLD, "ann@example.org", "bob@example.org")
    token = ClaimToken.from_entropy(secrets.token_bytes(16))
    claimed = await store.claim_due(ClaimRequest(lane, 1, timedelta(minutes=5), token))
    assert [row.id for row in claimed] == [marked]

    def rewrite(row_id: int, row_lane: str, payload: Any) -> dict[str, Any] | None:
        if row_id == marked:  # the worker's dispatched mark lands between the read and the write
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(
                    statements.render(statements.MARK, outbox_message),
                    {
                        "id": marked,
                        "token": token.value,
                        "status": "dispatched",
                        "reason": None,
                        "retry_delay": None,
                        "scrub_keys": ["password_reset_url"],
                        "patch": "{}",
                        "refund": False,
                        "now": None,
                    },
                )
        return reseal(payload, lane=row_lane, encryptor=ROTATED)

    report = await store.rewrite_payloads(rewrite, lane=lane, batch_size=10)

    assert (report.batches, report.examined) == (1, 2)
    assert report.rewritten == (other,)
    assert report.changed == (marked,)
    rows = stored(dsn, lane)
    assert rows[marked]["status"] == "dispatched"
    assert_scrubbed(rows[marked])  # the mark won: nothing written back
    assert_sealed(rows[other], "k2")


@pytest.mark.parametrize(
    ("args", "env", "reason"),
    [
        ([], {}, "give the key list"),
        ([], {"OUTBOX_ENCRYPTION_KEYS": f"k1:{base64.b64encode(b'x' * 16).decode()}"}, "'k1' is 128 bits"),
        (["--encryption-keys-file", __file__], {"OUTBOX_ENCRYPTION_KEYS": "k1:AAAA"}, "not both"),
    ],
)  # fmt: skip
def test_keys_rotate_refuses_unusable_keys_in_one_line(dsn, args, env, reason) -> None:
    result = outbox("keys", "rotate", "--database-url", dsn, *args, env=env)
    assert result.exit_code == 2
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("Error: --encryption-keys (OUTBOX_ENCRYPTION_KEYS)")
    assert reason in line
    assert "eHh4" not in line  # no key material (base64 of 'xxx') in the message


def test_keys_rotate_lists_rows_it_cannot_open_and_exits_1(dsn: str, lane: str) -> None:
    lost = AesGcmEncryptor({"k0": generate_key()}, active="k0")  # a key nobody has any more
    [unreadable] = enqueue_sealed_sync(dsn, lane, lost, "ann@example.org")
    [readable] = enqueue_sealed_sync(dsn, lane, OLD, "bob@example.org")

    result = outbox(
        "keys", "rotate", "--database-url", dsn, "--lane", lane,
        env={"OUTBOX_ENCRYPTION_KEYS": f"{format_key_entry('k2', K2)},{format_key_entry('k1', K1)}"},
    )  # fmt: skip

    assert result.exit_code == 1
    assert result.stdout.startswith("re-sealed 1 row(s) under key 'k2'")
    assert (
        f"cannot re-seal row {unreadable}: cannot decrypt field 'password_reset_url': key id 'k0'"
        " is not configured"
    ) in result.stdout
    assert "1 row(s) could not be re-sealed" in result.stderr
    rows = stored(dsn, lane)
    assert_sealed(rows[unreadable], "k0")  # left as it was
    assert_sealed(rows[readable], "k2")
