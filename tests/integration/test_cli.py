"""The ``outbox`` command line against a real PostgreSQL and a real SMTP server (STARTTLS).

What it promises: the schema can be printed, applied and verified; an operator can enqueue a smoke
test and a bad one writes nothing; the worker delivers over strict STARTTLS with the operator's CA
and stops gracefully on SIGTERM; a configuration that can't work exits 2 in one line naming the
setting; failed rows are listed without their payload; a requeue puts a failed row back and
refuses a sent one with the reason; environment twins work; the demo's invariants hold. The worker
sends at most --rows-in-flight rows at once over at most --smtp-sessions sessions, and with --listen
sends a row committed while it idles at once instead of at its next poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from click.testing import Result
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import AsyncConnectionPool
from tests.support.cli import one_line_error, outbox
from tests.support.postgres import query

from outbox_adapters.demo.sink import SmtpSink
from outbox_adapters.postgres import outbox_message, schema, statements
from outbox_adapters.postgres.channels import PostgresParkLedger
from outbox_adapters.postgres.upgrades import tenant_sql

pytestmark = pytest.mark.integration

SENDER = "outbox@example.com"
CANARY = f"canary{secrets.token_hex(6)}"


@pytest.fixture
def empty_database(postgres_dsn: str) -> Iterator[str]:
    """A second database with no outbox tables in it."""
    name = f"outbox_cli_empty_{secrets.token_hex(4)}"
    with psycopg.connect(postgres_dsn, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield make_conninfo("", **{**conninfo_to_dict(postgres_dsn), "dbname": name})
    with psycopg.connect(postgres_dsn, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def enqueue_email(dsn: str, lane: str, to: str, *extra: str) -> int:
    result = outbox(
        "enqueue", "email", "--database-url", dsn, "--lane", lane, "--to", to,
        "--subject", "Reset your password, $name",
        "--text", "Hello $name, choose a new password: $password_reset_url",
        "--field", "name=Ann",
        "--field", f"password_reset_url=https://app.example/reset/{CANARY}",
        *extra,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    match = re.fullmatch(r"enqueued as (\d+)", result.stdout.strip())
    assert match, result.stdout
    return int(match.group(1))


def run_worker(dsn: str, lane: str, sink: SmtpSink, *extra: str) -> Result:
    return outbox(
        "worker", "--drain", "--database-url", dsn, "--lane", lane,
        "--smtp-url", f"smtp://{sink.host}:{sink.port}", "--smtp-tls", "starttls",
        "--smtp-ca-file", str(sink.ca_file), "--sender", SENDER, "--poll-interval", "0.1",
        *extra,
    )  # fmt: skip


def worker_env(dsn: str, lane: str, sink: SmtpSink, **more: str) -> dict[str, str]:
    """The worker's settings for this lane and sink, through their OUTBOX_* environment twins."""
    return {
        "OUTBOX_DATABASE_URL": dsn,
        "OUTBOX_LANE": lane,
        "OUTBOX_SMTP_URL": f"smtp://{sink.host}:{sink.port}",
        "OUTBOX_SMTP_CA_FILE": str(sink.ca_file),
        "OUTBOX_SENDER": SENDER,
        **more,
    }


def status_of(dsn: str, row_id: int) -> tuple[str, int, dict[str, Any]]:
    [(status, attempts, payload)] = query(
        dsn, "SELECT status, attempts, payload FROM outbox_message WHERE id = %s", row_id
    )
    return status, attempts, payload


# --- schema -------------------------------------------------------------------------------------


def test_schema_sql_prints_the_ddl_without_a_database():
    result = outbox("schema", "sql")
    assert result.exit_code == 0
    assert "CREATE TABLE IF NOT EXISTS outbox_message" in result.stdout
    # One terminator per statement (a trigger function's body has semicolons of its own), then
    # the upgrade of an earlier release's rows, with the default tenant written in.
    upgrade = tenant_sql()
    assert result.stdout.count(";\n\n") == len(schema.ddl_statements()) + len(upgrade)
    assert result.stdout.endswith("".join(f"{statement};\n\n" for statement in upgrade))
    assert "SET tenant = 'default' WHERE tenant IS NULL" in result.stdout
    named = outbox("schema", "sql", "--existing-tenant", "o'hara")
    assert "SET tenant = 'o''hara' WHERE tenant IS NULL" in named.stdout


def test_schema_verify_lists_what_is_missing_until_apply_creates_it(empty_database):
    missing = outbox("schema", "verify", "--database-url", empty_database)
    assert missing.exit_code == 1
    assert "schema problem: table outbox_message is missing" in missing.stdout

    applied = outbox("schema", "apply", "--database-url", empty_database)
    assert applied.exit_code == 0, applied.output

    verified = outbox("schema", "verify", "--database-url", empty_database)
    assert verified.exit_code == 0, verified.output
    assert "schema OK" in verified.stdout


# --- enqueue ------------------------------------------------------------------------------------


def test_enqueue_email_writes_the_fields_and_honours_the_idempotency_key(dsn, lane):
    row_id = enqueue_email(dsn, lane, "ann@example.com", "--idempotency-key", "smoke-1")
    status, attempts, payload = status_of(dsn, row_id)
    assert (status, attempts) == ("pending", 0)
    assert payload["to"] == ["ann@example.com"]
    assert payload["password_reset_url"] == f"https://app.example/reset/{CANARY}"

    again = outbox(
        "enqueue", "email", "--database-url", dsn, "--lane", lane, "--to", "ann@example.com",
        "--subject", "s", "--text", "t", "--idempotency-key", "smoke-1",
    )  # fmt: skip
    assert again.exit_code == 0, again.output
    assert again.stdout.strip().startswith(f"already enqueued as {row_id}")
    assert query(dsn, "SELECT count(*) FROM outbox_message WHERE lane = %s", lane) == [(1,)]


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["--to", "ann@example.com\r\nBcc: x@evil.example"], "control character"),
        (["--to", "not an address"], "whitespace"),
        (["--to", "ann@example.com", "--field", "to=x@evil.example"], "'to' is a message part"),
        (["--to", "ann@example.com", "--field", "novalue"], "expected KEY=VALUE"),
    ],
)
def test_enqueue_refuses_bad_input_and_writes_nothing(dsn, lane, args, reason):
    result = outbox(
        "enqueue", "email", "--database-url", dsn, "--lane", lane,
        "--subject", "Hi", "--text", "Hello", *args,
    )  # fmt: skip
    assert result.exit_code == 2
    assert reason in one_line_error(result)
    assert query(dsn, "SELECT count(*) FROM outbox_message WHERE lane = %s", lane) == [(0,)]


# --- worker -------------------------------------------------------------------------------------


def test_worker_drain_delivers_over_starttls_and_scrubs(dsn, lane, sink):
    rows = [enqueue_email(dsn, lane, f"user{n}@example.com") for n in range(3)]

    result = run_worker(dsn, lane, sink, "--sender-name", "Outbox Test")

    assert result.exit_code == 0, result.output
    assert "timing: per-row budget 60s" in result.stdout
    assert "claim lease 360s" in result.stdout
    assert "SMTP security: starttls (strict), auth: none" in result.stdout
    assert re.search(r"worker stopped: .*dispatched 3\b", result.stdout), result.stdout
    received = sink.received
    assert sorted(r for mail in received for r in mail.recipients) == [
        f"user{n}@example.com" for n in range(3)
    ]
    assert all(mail.tls for mail in received)
    assert sum(sink.handler.plaintext_commands.values()) == 0
    assert all(CANARY.encode() in mail.data.replace(b"=\r\n", b"") for mail in received)
    for row_id in rows:
        status, attempts, payload = status_of(dsn, row_id)
        assert (status, attempts) == ("dispatched", 1)
        assert "password_reset_url" not in payload


def test_worker_never_prints_the_smtp_password(dsn, lane, sink):
    # The sink has no AUTH, so the send fails; what matters is what the worker printed.
    result = outbox(
        "worker", "--drain", "--database-url", dsn, "--lane", lane,
        "--smtp-url", f"smtp://mailer:hunter2secret@{sink.host}:{sink.port}",
        "--smtp-ca-file", str(sink.ca_file), "--sender", SENDER,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "auth: configured" in result.stdout
    assert "hunter2secret" not in result.output


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--batch-timeout", "10"], "batch_timeout 10s is shorter than batch_size 5"),
        (["--batch-size", "2", "--batch-timeout", "200"], "is not shorter than claim_lease 180s"),
        (["--budget", "dial=0"], "dial must be a duration above 0s"),
        (["--budget", "dialling=3"], "unknown budget name(s) dialling"),
        (["--budget", "dial"], "--budget (OUTBOX_BUDGET): expected STEP=SECONDS"),
    ],
)
def test_worker_refuses_a_broken_timing_chain_in_one_line(dsn, lane, sink, args, named):
    result = run_worker(dsn, lane, sink, *args)
    assert result.exit_code == 2
    assert named in one_line_error(result)
    assert sink.received == []


def test_worker_refuses_plaintext_smtp_in_production(dsn, lane, sink):
    result = run_worker(
        dsn, lane, sink, "--smtp-tls", "none", "--allow-plaintext", "--environment", "production"
    )
    assert result.exit_code == 2
    error = one_line_error(result)
    assert "mode 'none' (plaintext SMTP) is refused in environment 'production'" in error


def test_worker_stops_gracefully_on_sigterm(dsn, lane, sink):
    """A real process: SIGTERM stops the loop, the summary prints, the leader lease is given up."""
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        **worker_env(dsn, lane, sink, OUTBOX_POLL_INTERVAL="0.1"),
    }
    worker = subprocess.Popen(
        [sys.executable, "-m", "outbox_adapters", "worker"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        enqueue_email(dsn, lane, "live@example.com")
        deadline = time.monotonic() + 20
        while not sink.received and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sink.received, "the running worker did not deliver"
        worker.send_signal(signal.SIGTERM)
        stdout, stderr = worker.communicate(timeout=20)
    finally:
        with contextlib.suppress(ProcessLookupError):
            worker.kill()
    assert worker.returncode == 0, stderr
    assert "SIGTERM: stopping" in stderr
    assert re.search(r"worker stopped: .*dispatched 1\b", stdout), stdout
    [(live,)] = query(dsn, "SELECT expires_at > now() FROM outbox_leader WHERE lane = %s", lane)
    assert live is False, "the leader lease was not released at shutdown"


# --- worker: rows in flight, SMTP sessions, LISTEN wake-up ----------------------------------------


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (
            ["--rows-in-flight", "0"],
            (
                "--rows-in-flight (OUTBOX_ROWS_IN_FLIGHT): rows_in_flight must be between 1 and"
                " the batch size 5, got 0"
            ),
        ),
        (
            ["--batch-size", "2", "--batch-timeout", "150", "--rows-in-flight", "3"],
            (
                "--rows-in-flight (OUTBOX_ROWS_IN_FLIGHT): rows_in_flight must be between 1 and"
                " the batch size 2, got 3"
            ),
        ),
        (
            ["--smtp-sessions", "0"],
            (
                "--smtp-sessions (OUTBOX_SMTP_SESSIONS): SMTP max_sessions must be a whole number"
                " from 1 to 64, got 0"
            ),
        ),
        (["--smtp-sessions", "65"], "--smtp-sessions (OUTBOX_SMTP_SESSIONS): SMTP max_sessions"),
        (
            ["--group-marks"],
            "--group-marks (OUTBOX_GROUP_MARKS): group_marks needs rows_in_flight of 2 or more",
        ),
    ],
)
def test_worker_refuses_rows_in_flight_or_sessions_it_cannot_use(dsn, lane, sink, args, named):
    row_id = enqueue_email(dsn, lane, "waiting@example.com")

    result = run_worker(dsn, lane, sink, *args)

    assert result.exit_code == 2
    assert named in one_line_error(result)
    assert status_of(dsn, row_id)[:2] == ("pending", 0), "refused before claiming anything"
    assert sink.received == []


@pytest.mark.parametrize(
    ("rows_in_flight", "sessions", "at_once"),
    [(1, 4, 1), (3, 4, 3), (3, 1, 1)],
)
def test_rows_in_flight_and_smtp_sessions_bound_the_sends_at_once(
    dsn, lane, sink, monkeypatch, *, rows_in_flight, sessions, at_once
):
    """N rows in flight means N messages in the relay's hands at once, never more than sessions."""
    sending = 0
    most = 0
    received = sink.handler.handle_DATA

    async def slow_data(server: Any, session: Any, envelope: Any) -> str:
        # Runs on the sink's event loop: a message stays "in flight" for half a second, so
        # concurrent sends overlap here however fast the handshakes are.
        nonlocal sending, most
        sending += 1
        most = max(most, sending)
        try:
            await asyncio.sleep(0.5)
            reply: str = await received(server, session, envelope)
            return reply
        finally:
            sending -= 1

    monkeypatch.setattr(sink.handler, "handle_DATA", slow_data)
    rows = [enqueue_email(dsn, lane, f"batch{n}@example.com") for n in range(3)]

    result = run_worker(
        dsn, lane, sink,
        "--rows-in-flight", str(rows_in_flight), "--smtp-sessions", str(sessions),
    )  # fmt: skip

    assert result.exit_code == 0, result.output
    bound = f"rows in flight: {rows_in_flight} (a crash can duplicate at most {rows_in_flight} row"
    assert bound in result.stdout
    assert f"up to {sessions} reused session(s)" in result.stdout
    assert most == at_once
    assert ("the rest wait for one" in result.stdout) is (rows_in_flight > sessions)
    assert [status_of(dsn, row_id)[0] for row_id in rows] == ["dispatched"] * 3


def test_grouped_marks_deliver_every_row_once_and_say_their_bound(dsn, lane, sink):
    rows = [enqueue_email(dsn, lane, f"group{n}@example.com") for n in range(5)]

    result = run_worker(dsn, lane, sink, "--rows-in-flight", "2", "--group-marks")

    assert result.exit_code == 0, result.output
    assert (
        "rows in flight: 2 (a crash can duplicate at most 2 row(s)); marks grouped per window"
        in result.stdout
    )
    assert [status_of(dsn, row_id)[0] for row_id in rows] == ["dispatched"] * 5
    assert sorted(r for mail in sink.received for r in mail.recipients) == sorted(
        f"group{n}@example.com" for n in range(5)
    )


def test_the_worker_options_default_to_strict_listening_and_the_mailers_sessions(dsn, lane, sink):
    from outbox_adapters.smtp import SmtpSettings  # noqa: PLC0415 - only this test needs it

    result = run_worker(dsn, lane, sink)

    assert result.exit_code == 0, result.output
    assert "rows in flight: 1 (a crash can duplicate at most 1 row(s))" in result.stdout
    default = SmtpSettings.from_url("smtp://relay.example", sender=SENDER).max_sessions
    assert f"up to {default} reused session(s)" in result.stdout
    assert "wake-up: LISTEN outbox_wakeup (polling every 0.1s stays the fallback)" in result.stdout


def test_the_new_worker_options_have_environment_twins(dsn, lane, sink):
    env = worker_env(
        dsn,
        lane,
        sink,
        OUTBOX_POLL_INTERVAL="0.1",
        OUTBOX_ROWS_IN_FLIGHT="2",
        OUTBOX_SMTP_SESSIONS="3",
        OUTBOX_LISTEN="false",
    )
    enqueue_email(dsn, lane, "twin@example.com")

    result = outbox("worker", "--drain", env=env)

    assert result.exit_code == 0, result.output
    assert "rows in flight: 2 (a crash can duplicate at most 2 row(s))" in result.stdout
    assert "up to 3 reused session(s)" in result.stdout
    assert "wake-up: polling every 0.1s" in result.stdout
    assert "LISTEN" not in result.stdout
    assert re.search(r"worker stopped: .*dispatched 1\b", result.stdout), result.stdout

    refused = outbox("worker", "--drain", env={**env, "OUTBOX_ROWS_IN_FLIGHT": "0"})
    assert refused.exit_code == 2
    assert "(OUTBOX_ROWS_IN_FLIGHT): rows_in_flight must be" in one_line_error(refused)


def test_a_listening_worker_sends_a_new_row_at_once_not_at_its_next_poll(dsn, lane, sink):
    """With a 60 s poll, only the NOTIFY of the commit can explain a send within seconds."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **worker_env(dsn, lane, sink)}
    enqueue_email(dsn, lane, "first@example.com")
    worker = subprocess.Popen(
        [sys.executable, "-m", "outbox_adapters", "worker", "--poll-interval", "60", "--listen"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # The first row proves the worker has claimed once: it now sleeps on its 60 s poll.
        deadline = time.monotonic() + 20
        while not sink.received and time.monotonic() < deadline and worker.poll() is None:
            time.sleep(0.05)
        if not sink.received:
            worker.kill()
            pytest.fail(f"the worker sent nothing: {worker.communicate(timeout=20)}")

        enqueue_email(dsn, lane, "second@example.com")
        committed = time.monotonic()
        while len(sink.received) < 2 and time.monotonic() < committed + 5:
            time.sleep(0.02)
        waited = time.monotonic() - committed
        assert len(sink.received) == 2, "the row waited for the poll: no wake-up on commit"

        worker.send_signal(signal.SIGTERM)
        stdout, stderr = worker.communicate(timeout=20)
    finally:
        with contextlib.suppress(ProcessLookupError):
            worker.kill()
    assert worker.returncode == 0, stderr
    assert "wake-up: LISTEN outbox_wakeup (polling every 60s stays the fallback)" in stdout
    assert re.search(r"worker stopped: .*dispatched 2\b", stdout), stdout
    assert waited < 5


# --- failed, requeue, stats -----------------------------------------------------------------------


def test_failed_lists_a_bounced_row_without_its_payload(dsn, lane, sink):
    bounced = enqueue_email(dsn, lane, "bounce-me@example.com")
    assert run_worker(dsn, lane, sink).exit_code == 0

    result = outbox("failed", "--database-url", dsn, "--lane", lane)

    assert result.exit_code == 0, result.output
    assert "550 5.1.1" in result.stdout
    assert re.search(rf"^\s+{bounced}\s+{lane}\s+1\s", result.stdout, re.MULTILINE), result.stdout
    assert CANARY not in result.output
    # The refused recipient is named (ADR 0015: the operator must see who bounced), nothing else
    # of the payload is.
    assert "recipient bounce-me@example.com refused: SMTP 550 5.1.1" in result.stdout
    assert "Reset your password" not in result.output


def test_failed_lists_parked_events_by_class_with_the_redrive_command(dsn, lane):
    async def park() -> None:
        async with AsyncConnectionPool(dsn, kwargs={"autocommit": True}, open=False) as pool:
            ledger = PostgresParkLedger(pool)
            for event in ("e-1", "e-2"):
                await ledger.record(
                    lane, event, "tenant_welcome", reason="no admin address: event 1", attempts=2
                )

    asyncio.run(park())
    result = outbox("failed", "--database-url", dsn, "--queue", "parked", "--lane", lane)

    assert result.exit_code == 0, result.output
    assert re.search(r"^\s+2\s+no admin address\s", result.stdout, re.MULTILINE), result.stdout
    assert re.search(rf"^\s+e-2\s+{lane}\s+tenant_welcome\s+2\s", result.stdout, re.MULTILINE)
    assert "outbox dlq redrive" in result.stdout
    empty = outbox("failed", "--database-url", dsn, "--queue", "parked", "--lane", lane + "-x")
    assert f"no parked events in channel {lane}-x" in empty.stdout


def test_requeue_puts_a_failed_row_back_and_refuses_a_sent_one(dsn, lane, sink):
    bounced = enqueue_email(dsn, lane, "bounce-me@example.com")
    sent = enqueue_email(dsn, lane, "fine@example.com")
    assert run_worker(dsn, lane, sink).exit_code == 0
    assert status_of(dsn, bounced)[0] == "failed"
    assert status_of(dsn, sent)[0] == "dispatched"

    requeued = outbox("requeue", str(bounced), "--database-url", dsn, "--actor", "ops-test")
    assert requeued.exit_code == 0, requeued.output
    assert f"requeued 1 row(s) as ops-test: {bounced}" in requeued.stdout
    status, attempts, payload = status_of(dsn, bounced)
    assert (status, attempts) == ("pending", 0)
    assert payload["password_reset_url"].endswith(CANARY)  # a failed row kept its link
    audit = query(dsn, "SELECT actor FROM outbox_requeue_audit WHERE message_id = %s", bounced)
    assert audit == [("ops-test",)]

    refused = outbox("requeue", str(sent), "--database-url", dsn)
    assert refused.exit_code == 1
    assert re.search(rf"refused {sent}: the row is dispatched .*scrubbed", refused.stdout)
    assert status_of(dsn, sent)[0] == "dispatched"


def test_get_shows_a_row_with_its_secret_values_masked(dsn, lane, sink):
    bounced = enqueue_email(dsn, lane, "bounce-me@example.com")
    assert run_worker(dsn, lane, sink).exit_code == 0

    result = outbox("get", str(bounced), "--database-url", dsn)

    assert result.exit_code == 0, result.output
    assert re.search(rf"^id:\s+{bounced}$", result.stdout, re.MULTILINE), result.stdout
    assert re.search(r"^status:\s+failed$", result.stdout, re.MULTILINE), result.stdout
    assert "550 5.1.1" in result.stdout
    # The failed row still holds its link; get shows that it is there, never what it is.
    assert '"password_reset_url": "[scrubbed]"' in result.stdout
    assert CANARY not in result.output
    masked_more = outbox("get", str(bounced), "--database-url", dsn, "--secret-key", "name")
    assert '"name": "[scrubbed]"' in masked_more.stdout

    missing = outbox("get", "987654321", "--database-url", dsn)
    assert missing.exit_code == 1
    assert "no row 987654321" in one_line_error(missing)


def test_stats_counts_stale_marks_per_lane(dsn, lane):
    row_id = enqueue_email(dsn, lane, "slow@example.com")
    with psycopg.connect(dsn, autocommit=True) as conn:
        # A worker paused past its lease: its late mark finds the row re-claimed by a sibling.
        conn.execute("UPDATE outbox_message SET claim_token = 'sibling' WHERE id = %s", (row_id,))
        conn.execute(
            statements.render(statements.MARK, outbox_message),
            {"id": row_id, "token": "paused", "status": "failed", "reason": "late",
             "retry_delay": None, "scrub_keys": [], "now": None, "patch": "{}",
             "refund": False},
        )  # fmt: skip

    stats = outbox("stats", "--database-url", dsn)

    assert stats.exit_code == 0, stats.output
    assert re.search(rf"^{lane}\s+1\s+0\s+0\s+0\s+1$", stats.stdout, re.MULTILINE), stats.stdout


def test_requeue_all_failed_needs_a_filter_or_yes(dsn, lane, sink):
    bounced = enqueue_email(dsn, lane, "bounce-me@example.com")
    assert run_worker(dsn, lane, sink).exit_code == 0

    unfiltered = outbox("requeue", "--all-failed", "--database-url", dsn)
    assert unfiltered.exit_code == 2
    assert "--yes" in one_line_error(unfiltered)
    assert status_of(dsn, bounced)[0] == "failed"

    filtered = outbox(
        "requeue", "--all-failed", "--lane", lane, "--error-contains", "550",
        "--since", "2000-01-01T00:00", "--database-url", dsn,
    )  # fmt: skip
    assert filtered.exit_code == 0, filtered.output
    assert f": {bounced}" in filtered.stdout
    assert status_of(dsn, bounced)[0] == "pending"


def test_environment_twins_configure_every_command(dsn, lane):
    env = {
        "OUTBOX_DATABASE_URL": dsn,
        "OUTBOX_LANE": lane,
        "OUTBOX_ENQUEUE_TO": "twin@example.com",
        "OUTBOX_ENQUEUE_SUBJECT": "From the environment",
        "OUTBOX_ENQUEUE_TEXT": "Hello",
    }
    enqueued = outbox("enqueue", "email", env=env)
    assert enqueued.exit_code == 0, enqueued.output

    stats = outbox("stats", env=env)
    assert stats.exit_code == 0, stats.output
    # pending, dispatched, skipped, failed, then the stale marks
    assert re.search(rf"^{lane}\s+1\s+0\s+0\s+0\s+0$", stats.stdout, re.MULTILINE), stats.stdout

    missing = outbox("stats", env={"OUTBOX_DATABASE_URL": ""})
    assert missing.exit_code == 2
    assert "OUTBOX_DATABASE_URL" in missing.output


def test_an_unreachable_database_is_one_line_without_the_password():
    result = outbox("stats", "--database-url", "postgresql://ops:s3cretpw@127.0.0.1:1/outbox")
    assert result.exit_code == 1
    assert "cannot use the database" in one_line_error(result)
    assert "s3cretpw" not in result.output


# --- demo ---------------------------------------------------------------------------------------


def test_demo_delivers_every_row_once_and_checks_its_invariants(dsn):
    # The demo's own twin, not OUTBOX_DATABASE_URL: a demo must never write to the real outbox.
    env = {"OUTBOX_DEMO_DATABASE_URL": dsn, "OUTBOX_DATABASE_URL": "postgresql://x@127.0.0.1:1/x"}
    result = outbox("demo", "--rows", "60", env=env)

    assert result.exit_code == 0, result.output
    figures = dict(re.findall(r"^  (\S.*?\S) {2,}(\S+)", result.stdout, re.MULTILINE))
    assert figures["enqueued"] == "60"
    assert figures["sent (dispatched)"] == "54"  # 3 bounce + 3 always-transient fail
    assert figures["failed permanent (550 bounce)"] == "3"
    assert figures["failed after retries (451, schedule used up)"] == "3"
    assert figures["retried (needed more than one attempt)"] == "6"  # transient + flaky
    assert figures["messages received by the sink"] == "54"
    assert figures["duplicates seen by the sink"] == "0"
    assert figures["dispatched rows still holding the canary"] == "0"
    assert figures["plaintext SMTP commands"] == "0"
    assert "invariants hold" in result.stdout
    assert "] 60/60" in result.stderr
