"""Security promise 1: secrets at rest only while a row is pending or failed (RELIABILITY.md).

"Secret-bearing payload keys are in plaintext only while a row is pending or failed; the mark that
makes it dispatched/skipped removes them in the same UPDATE. A canary token placed in a payload is
found afterwards only in pending/failed rows."

The test pushes a canary through the whole pipeline (enqueue on a host transaction → a first pass
against a relay that is down → a second pass against the real SMTP server: delivered, bounced,
deferred, suppressed, not yet due, undecodable; an operator's requeue of the bounce), then dumps the
WHOLE database with the real ``pg_dump`` (the binary that matches the server: the machine's for
PostgreSQL 15 via OUTBOX_TEST_DSN, pgserver's bundled one for the embedded server) and looks for the
canary in every line of every table. Each hit must be a pending or failed ``outbox_message`` row,
and the same set of rows is found again with SQL.

Mechanism under test: the scrub in the dispatched/skipped MARK (``payload - scrub_keys`` in the same
UPDATE, catalogue C6) with the default secret keys. Drop the scrub and ``canary_in_sent_rows``
becomes the number of sent rows.

Webhook signing secrets (ADR 0030), in the same test and the same dump: two canary secrets go
through registration, delivery to a real local receiver, ``rotate_secret`` and ``outbox keys
rotate``, with encryption keys; the receiver verifies every request with them, and the dump holds
no copy of either, as ``whsec_...``, bare base64 or hex, neither after ``rotate_secret`` nor at
the end: the figure line's ``webhook_secrets_in_dump=0``. Mechanism: the seal in ``add_endpoint`` / ``rotate_secret``
(``store_secret``); store secrets as text and the figure becomes the number of spellings found.
A probe stored without keys is found (``test_the_dump_check_sees_a_webhook_secret_stored_as_text``),
so the search is not vacuous.
"""

from __future__ import annotations

import asyncio
import base64
import re
import secrets
import shutil
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import attrs
import psycopg
import pytest
from tests.support.cli import outbox
from tests.support.postgres import empty_outbox
from tests.support.receivers import HttpReceiver
from tests.support.webhooks import GUARD, webhooks

from outbox_adapters.crypto import AesGcmEncryptor
from outbox_adapters.demo.sink import free_port
from outbox_adapters.http import HttpxWebhookSender
from outbox_adapters.lanes.webhook_workers import WebhookWorkers
from outbox_adapters.lanes.webhooks import delivery_lane, drain_lane
from outbox_adapters.postgres.webhooks import WebhookRepository
from outbox_adapters.smtp import SmtpMailer, SmtpSettings
from outbox_core.ports import Encryptor, RequeueRequest
from outbox_core.signing import WebhookSecret, verify
from outbox_core.tls import SmtpSecurityPolicy

pytestmark = pytest.mark.integration

_VERSION = re.compile(r"\(PostgreSQL\) (\d+)")


def server_major(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SHOW server_version_num").fetchone()
    assert row is not None
    return int(row[0]) // 10_000


def pg_dump_for(dsn: str) -> Path:
    """The pg_dump whose major version matches the server's (or the nearest newer one)."""
    candidates = [Path(p) for p in {shutil.which("pg_dump")} if p]
    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_dump"))
    try:
        import pgserver  # noqa: PLC0415 - the embedded extra, found only where it is installed

        candidates.append(Path(pgserver.__file__).parent / "pginstall" / "bin" / "pg_dump")
    except ImportError:
        pass
    want = server_major(dsn)
    found: dict[int, Path] = {}
    for candidate in candidates:
        if not candidate.is_file():
            continue
        version = subprocess.run(  # noqa: S603 - a pg_dump binary found on this machine
            [str(candidate), "--version"], capture_output=True, text=True, check=False
        ).stdout
        match = _VERSION.search(version)
        if match and int(match.group(1)) >= want:
            found.setdefault(int(match.group(1)), candidate)
    if not found:
        pytest.fail(f"no pg_dump for PostgreSQL {want} (looked at {[str(c) for c in candidates]})")
    return found[min(found)]


def dump_lines_with(dsn: str, token: str) -> list[tuple[str, dict[str, str]]]:
    """``(table, {column: value})`` of every data line of a full ``pg_dump`` that holds ``token``."""
    dump = subprocess.run(  # noqa: S603 - our own database, our own pg_dump
        [str(pg_dump_for(dsn)), "--data-only", "--no-owner", "--dbname", dsn],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    assert "COPY public.outbox_message" in dump, "the dump holds no outbox_message data"
    hits: list[tuple[str, dict[str, str]]] = []
    table, columns = "", []
    for line in dump.splitlines():
        copy = re.match(r"COPY (\S+) \((.*)\) FROM stdin;", line)
        if copy:
            table, columns = copy.group(1), [c.strip().strip('"') for c in copy.group(2).split(",")]
            continue
        if line == "\\.":
            table, columns = "", []
            continue
        if token in line:
            values = line.split("\t")
            hits.append(
                (table or "(outside any table's data)", dict(zip(columns, values, strict=False)))
            )
    return hits


async def test_a_payload_canary_is_found_only_in_pending_or_failed_rows(
    pipeline, store, log_canary, report_figure, wire_check
):
    # A clean database first: ``keys rotate`` below reads every table (and a sealed secret left
    # behind would stop a later keyless webhook worker from starting); clean again at the end.
    empty_outbox(pipeline.dsn)
    try:
        await _payload_and_webhook_canaries(pipeline, store, log_canary, report_figure, wire_check)
    finally:
        empty_outbox(pipeline.dsn)


async def _payload_and_webhook_canaries(pipeline, store, log_canary, report_figure, wire_check):
    hooks = await webhook_round(pipeline.dsn, log_canary)
    canary = log_canary.new("p1canary")
    secrets_ = {
        "password_reset_url": f"https://shop.example/reset?token={canary}",
        "setup_url": f"https://shop.example/setup/{canary}",
        "public_token": canary,
    }

    def mail(to, **kwargs):
        return pipeline.email(
            to=to,
            subject="Your account",
            text="Reset: $password_reset_url\nSet up: $setup_url",
            html="<a href='$password_reset_url'>reset</a> $public_token",
            fields={**secrets_, "customer": "c-1"},
            **kwargs,
        )

    later = datetime.now(UTC) + timedelta(days=1)
    ids = await pipeline.enqueue(
        mail("ann@example.org"),
        mail("bob@example.org"),
        mail("bounce@example.org"),
        mail("transient@example.org"),
        mail("gone@example.org"),
        mail("later@example.org", not_before=later),
    )
    ann, bob, bounce, transient, gone, not_due = ids
    raw = pipeline.insert_raw(
        {"to": "a@b\r\nRCPT TO:<x>", "subject": "Hi", "text": "Hi", **secrets_}
    )

    def suppressed(to: tuple[str, ...]) -> list[str]:
        return [address for address in to if address == "gone@example.org"]

    # Pass 1: the relay is down (nothing listens): every due row is deferred, secrets kept.
    down = SmtpMailer(
        SmtpSettings(
            host="127.0.0.1",
            port=free_port(),
            policy=SmtpSecurityPolicy(sender=pipeline.sender),
            tls_context=pipeline.sink.client_context(),
        )
    )
    await pipeline.drain(down, suppressed=suppressed)
    first = pipeline.rows()
    assert first[ann]["status"] == "pending"
    assert first[ann]["last_error"]
    with psycopg.connect(pipeline.dsn, autocommit=True) as conn:  # due again now
        conn.execute(
            "UPDATE outbox_message SET next_attempt_at = now() WHERE lane = %s AND status ="
            " 'pending' AND id <> %s",
            (pipeline.lane, not_due),
        )
    # Pass 2: the real server.
    await pipeline.drain(suppressed=suppressed)
    # The operator puts the bounce back (it is pending again, with its secrets, as it must be).
    requeued = await store.requeue_failed(
        RequeueRequest(actor="ops@shop.example", row_ids=(bounce,))
    )
    assert requeued.requeued == (bounce,)

    rows = pipeline.rows()
    states = {row_id: rows[row_id]["status"] for row_id in rows}
    assert states == {
        ann: "dispatched", bob: "dispatched", bounce: "pending", transient: "pending",
        gone: "failed", not_due: "pending", raw: "failed",
    }  # fmt: skip
    # The canary really went through: it is in what the server received.
    assert len(pipeline.sink.received) == 2
    for received in pipeline.sink.received:
        body = wire_check.reparse(received.data).get_body(("plain",)).get_content()
        assert canary in body
    for sent in (ann, bob):
        assert rows[sent]["payload"]["customer"] == "c-1"  # only the secret keys went
        assert rows[sent]["scrubbed_at"] is not None

    hits = dump_lines_with(pipeline.dsn, canary)
    in_pending_or_failed = [
        row for table, row in hits
        if table == "public.outbox_message" and row.get("status") in {"pending", "failed"}
    ]  # fmt: skip
    elsewhere = [(table, row.get("id"), row.get("status")) for table, row in hits]
    elsewhere = [
        hit
        for hit in elsewhere
        if hit[0] != "public.outbox_message" or hit[2] not in {"pending", "failed"}
    ]
    at_end = webhook_forms_in_dump(pipeline.dsn, hooks.secrets)
    secret_hits = {
        **{f"{k} (before keys rotate)": v for k, v in hooks.hits_before_keys_rotate.items()},
        **{f"{k} (at the end)": v for k, v in at_end.items()},
    }
    report_figure(
        f"P1 canary_rows_pending_or_failed={len(in_pending_or_failed)}"
        f" canary_in_sent_rows={len(elsewhere)}"
        f" webhook_secrets_in_dump={sum(secret_hits.values())}"
        f" (2 canary secrets as whsec/base64/hex, 2 dumps: after rotate_secret and at the end;"
        f" {hooks.verified} deliveries verified with them; sealed under"
        f" {','.join(sorted(set(hooks.kids)))} after keys rotate)"
    )
    assert elsewhere == [], f"the canary is in sent rows or other tables: {elsewhere}"
    assert sum(secret_hits.values()) == 0, secret_hits
    assert "webhook secrets: re-sealed 2, sealed 0 from plaintext" in hooks.keys_rotate_output
    assert hooks.kids == ("k2", "k2")
    assert {int(row["id"]) for row in in_pending_or_failed} == {
        bounce,
        transient,
        gone,
        not_due,
        raw,
    }

    # The same rows, found again with SQL (and no secret in any error text).
    with psycopg.connect(pipeline.dsn) as conn:
        found = conn.execute(
            "SELECT id, status FROM outbox_message WHERE strpos(payload::text, %s) > 0"
            " OR strpos(coalesce(last_error, ''), %s) > 0",
            (canary, canary),
        ).fetchall()
        in_audit = conn.execute(
            "SELECT count(*) FROM outbox_requeue_audit WHERE strpos(coalesce(previous_error, ''),"
            " %s) > 0",
            (canary,),
        ).fetchone()
    assert dict(found) == {
        bounce: "pending",
        transient: "pending",
        gone: "failed",
        not_due: "pending",
        raw: "failed",
    }
    assert in_audit == (0,)
    assert log_canary.leaks_since(0) == []


async def test_the_canary_check_sees_a_secret_in_a_sent_row(pipeline, log_canary):
    """The dump check is not vacuous: a dispatched row that kept its secret is found."""
    canary = log_canary.new("p1probe")
    [row_id] = await pipeline.enqueue(
        pipeline.email(to="ann@example.org", fields={"password_reset_url": canary})
    )
    with psycopg.connect(pipeline.dsn, autocommit=True) as conn:  # a mark WITHOUT the scrub
        conn.execute("UPDATE outbox_message SET status = 'dispatched' WHERE id = %s", (row_id,))
    hits = dump_lines_with(pipeline.dsn, canary)
    assert [(table, row["id"], row["status"]) for table, row in hits] == [
        ("public.outbox_message", str(row_id), "dispatched")
    ]


# --- webhook signing secrets (ADR 0030) ------------------------------------------------------------

KEY1, KEY2 = secrets.token_bytes(32), secrets.token_bytes(32)
ENTRY1 = f"k1:{base64.b64encode(KEY1).decode()}"
ENTRY2 = f"k2:{base64.b64encode(KEY2).decode()}"


def secret_forms(secret: WebhookSecret) -> dict[str, str]:
    """The spellings a dump (or a log) could hold a signing secret in."""
    return {
        "whsec": secret.to_text(),
        "base64": base64.b64encode(secret.key).decode(),
        "hex": secret.key.hex(),
    }


def canary_secret(log_canary) -> WebhookSecret:
    secret = WebhookSecret.generate_from(secrets.token_bytes(32))
    log_canary.register(*secret_forms(secret).values())
    return secret


async def deliver_all(pool, keys: Encryptor) -> None:
    async with HttpxWebhookSender(GUARD) as sender:
        await WebhookWorkers(
            pool,
            sender,
            drain_config=drain_lane(poll_interval=0.05),
            delivery_config=delivery_lane(poll_interval=0.05),
            encryptor=keys,
        ).run(drain=True)


@attrs.frozen
class WebhookRound:
    """What the webhook part of P1 did: the canary secrets, the requests the receiver verified,
    and the key id every stored secret is sealed under afterwards."""

    secrets: tuple[WebhookSecret, ...]
    verified: int
    kids: tuple[str, ...]
    #: Dump hits of the canaries after ``rotate_secret``, before ``keys rotate`` re-sealed them.
    hits_before_keys_rotate: dict[str, int]
    keys_rotate_output: str


async def webhook_round(dsn: str, log_canary) -> WebhookRound:
    """Two canary signing secrets through registration, delivery to a real local receiver,
    ``rotate_secret`` and ``outbox keys rotate`` (k1 -> k2, then k1 dropped), with keys. The
    receiver verifies every request with the canaries: the first, then both during the overlap."""
    first, second = canary_secret(log_canary), canary_secret(log_canary)
    k1 = AesGcmEncryptor({"k1": KEY1}, active="k1")
    k2 = AesGcmEncryptor({"k2": KEY2}, active="k2")
    async with webhooks(dsn) as wh:
        with HttpReceiver() as hook:
            repo = WebhookRepository(wh.pool, encryptor=k1)
            endpoint = await repo.add_endpoint(
                hook.url(), ["invoice.paid"], secret=first.to_text(), tenant="acme"
            )
            await wh.enqueue("invoice.paid", invoice=1)
            await deliver_all(wh.pool, k1)
            await repo.rotate_secret(
                endpoint.id, new_secret=second.to_text(), overlap=timedelta(hours=1)
            )
            await wh.enqueue("invoice.paid", invoice=2)
            await deliver_all(wh.pool, k1)
            before = webhook_forms_in_dump(dsn, (first, second))
            rotated = await asyncio.to_thread(
                outbox,
                "keys", "rotate", "--database-url", dsn,
                env={"OUTBOX_ENCRYPTION_KEYS": f"{ENTRY2},{ENTRY1}"},
            )  # fmt: skip
            assert rotated.exit_code == 0, rotated.output
            await wh.enqueue("invoice.paid", invoice=3)
            await deliver_all(wh.pool, k2)  # k1 dropped
            requests = list(hook.requests)
        kids = await wh.rows(
            "SELECT CASE WHEN secret LIKE '{%%' THEN secret::jsonb->>'kid' ELSE 'plaintext' END"
            " FROM outbox_webhook_secret ORDER BY id"
        )
    assert len(requests) == 3
    now = int(time.time())
    verify(requests[0].headers, requests[0].body, [first], now=now)
    for request in requests[1:]:
        verify(request.headers, request.body, [first], now=now)
        verify(request.headers, request.body, [second], now=now)
    return WebhookRound(
        secrets=(first, second),
        verified=len(requests),
        kids=tuple(k for (k,) in kids),
        hits_before_keys_rotate=before,
        keys_rotate_output=rotated.stdout,
    )


def webhook_forms_in_dump(dsn: str, secrets_: tuple[WebhookSecret, ...]) -> dict[str, int]:
    """Dump lines holding each canary secret in each spelling (``"0 whsec": 0``, ...)."""
    return {
        f"{n} {form}": len(dump_lines_with(dsn, text))
        for n, secret in enumerate(secrets_)
        for form, text in secret_forms(secret).items()
    }


async def test_the_dump_check_sees_a_webhook_secret_stored_as_text(dsn, log_canary):
    """The webhook part of the dump check is not vacuous: a secret stored without keys is found,
    as stored (``whsec_`` and its base64; hex is not how it is stored)."""
    empty_outbox(dsn)
    probe = canary_secret(log_canary)
    try:
        async with webhooks(dsn) as wh:
            await wh.repo.add_endpoint(
                "https://hooks.example/in", ["x"], secret=probe.to_text(), tenant="acme"
            )
        assert webhook_forms_in_dump(dsn, (probe,)) == {"0 whsec": 1, "0 base64": 1, "0 hex": 0}
    finally:
        empty_outbox(dsn)
