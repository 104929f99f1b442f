"""PostgresStore against a real PostgreSQL: the locks of ADR 0004 and ADR 0006 (catalogue C10).

Each safety mechanism of the SQL has one test here that turns red when it is removed
(RELIABILITY.md, mutation matrix): the concurrent-claimers test (lease stamp in the claim), the
sibling-lock test (``FOR UPDATE SKIP LOCKED``), the fence test (claim token in the mark), the
status-guard test (``status = 'pending'`` in the mark) and the scrub test (scrub in the same UPDATE).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import secrets
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from sqlalchemy import BigInteger, Column, MetaData, Table, Text
from sqlalchemy.dialects import postgresql
from sqlalchemy.schema import CreateTable
from tests.support.postgres import stored as fetch

from outbox_adapters.clock import FakeClock
from outbox_adapters.lanes.email import email_lane
from outbox_adapters.postgres import queue_table, schema, statements
from outbox_adapters.postgres.store import NO_SUCH_ROW, PostgresStore
from outbox_adapters.runtime import Worker
from outbox_core.backoff import SlotSchedule
from outbox_core.delivery import Status
from outbox_core.errors import ConfigurationError, StoreUnavailable
from outbox_core.messages import ClaimedRow, ClaimToken, Mark
from outbox_core.outcomes import Outcome
from outbox_core.ports import ClaimRequest, MarkResult, OutboxStore, RequeueRequest

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("empty_outbox")]

LANE = "email"
LEASE = timedelta(minutes=6)
#: A fixed "now" for tests that inject the clock: far from the database's real time on purpose.
T0 = datetime(2031, 5, 4, 12, 0, tzinfo=UTC)
SECRETS = frozenset(
    {"setup_url", "update_url", "password_reset_url", "invite_url", "public_token", "pdf"}
)


def token() -> ClaimToken:
    return ClaimToken.from_entropy(secrets.token_bytes(16))


def claim(limit: int = 10, *, now: datetime | None = None, lane: str = LANE) -> ClaimRequest:
    return ClaimRequest(lane=lane, limit=limit, lease=LEASE, token=token(), now=now)


def insert(
    dsn: str,
    count: int = 1,
    *,
    due: datetime | None = None,
    payload: dict[str, Any] | None = None,
    lane: str = LANE,
) -> list[int]:
    """Rows written directly (enqueue has tests of its own), due at ``due`` (default: DB now)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return [
            conn.execute(
                "INSERT INTO outbox_message (lane, payload, next_attempt_at)"
                " VALUES (%s, %s, coalesce(%s, now())) RETURNING id",
                (lane, psycopg.types.json.Jsonb(payload or {"n": n}), due),
            ).fetchone()[0]  # type: ignore[index]
            for n in range(count)
        ]


def db_now(dsn: str) -> datetime:
    """The database's clock, now (``clock_timestamp()``: not a transaction's start)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT clock_timestamp()").fetchone()
    assert row is not None
    at: datetime = row[0]
    return at


def test_it_satisfies_the_port(store: PostgresStore) -> None:
    assert isinstance(store, OutboxStore)


# --- claim ---------------------------------------------------------------------------------------


async def test_two_concurrent_claimers_attempt_every_row_exactly_once(
    dsn: str, store: PostgresStore
):
    # Mutation lock: the lease stamp in CLAIM. Without it a claimed row stays due, and the next
    # claim (by either worker) takes it again.
    async with await PostgresStore.open(dsn, max_size=2) as sibling:
        for _ in range(5):
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("TRUNCATE outbox_message")
            ids = insert(dsn, 10)
            seen: collections.Counter[int | str] = collections.Counter()
            start = asyncio.Event()

            async def worker(
                s: PostgresStore,
                seen: collections.Counter[int | str] = seen,
                start: asyncio.Event = start,
            ) -> None:
                await start.wait()
                for _ in range(8):
                    for row in await s.claim_due(claim(limit=3)):
                        seen[row.id] += 1
                    await asyncio.sleep(0)

            tasks = [asyncio.create_task(worker(store)), asyncio.create_task(worker(sibling))]
            start.set()
            await asyncio.gather(*tasks)
            assert sorted(seen) == ids
            assert set(seen.values()) == {1}, f"rows attempted more than once: {seen}"
            assert {fetch(dsn, i)["attempts"] for i in ids} == {1}


async def test_a_claim_skips_rows_a_sibling_transaction_holds_and_takes_them_after(
    dsn: str, store: PostgresStore
):
    # Mutation lock: FOR UPDATE SKIP LOCKED. Without SKIP LOCKED (or without FOR UPDATE) the claim
    # waits on the sibling's locks: lock_timeout turns that into an error within 2 s.
    ids = insert(dsn, 10)
    held = ids[::2]
    free = ids[1::2]
    async with await psycopg.AsyncConnection.connect(dsn) as sibling:
        await sibling.execute(
            "SELECT id FROM outbox_message WHERE id = ANY(%s) FOR UPDATE", (held,)
        )
        try:
            first = await asyncio.wait_for(store.claim_due(claim()), timeout=5)
        except (psycopg.errors.LockNotAvailable, TimeoutError):
            pytest.fail("the claim blocked on rows a sibling transaction holds")
        assert [row.id for row in first] == free
        # The worker finishes its rows, as a real one would.
        for row in first:
            assert await store.mark_if_pending(Mark.dispatched(row, scrub_keys=SECRETS)) is (
                MarkResult.APPLIED
            )
        await sibling.rollback()
    second = await store.claim_due(claim())
    assert [row.id for row in second] == held


async def test_claim_counts_the_attempt_stamps_the_lease_and_returns_claimed_rows(
    dsn: str, store: PostgresStore
):
    [row_id] = insert(dsn, due=T0 - timedelta(seconds=1), payload={"to": "a@example.org"})
    request = claim(now=T0)
    [row] = await store.claim_due(request)
    assert row == ClaimedRow(
        id=row_id,
        lane=LANE,
        payload={"to": "a@example.org"},
        attempts=1,
        token=request.token,
        lease_expires_at=T0 + LEASE,
        created_at=row.created_at,
    )
    stored = fetch(dsn, row_id)
    assert stored["next_attempt_at"] == T0 + LEASE
    assert stored["claimed_at"] == T0
    assert stored["claim_token"] == request.token.value
    # Leased: not due again before the lease ends, due again right at its end.
    assert await store.claim_due(claim(now=T0 + LEASE - timedelta(microseconds=1))) == []
    [again] = await store.claim_due(claim(now=T0 + LEASE))
    assert again.attempts == 2


async def test_claim_uses_the_database_clock_unless_now_is_given(dsn: str, store: PostgresStore):
    [future] = insert(dsn, due=datetime.now(UTC) + timedelta(hours=1))
    assert await store.claim_due(claim()) == []
    [row] = await store.claim_due(claim(now=datetime.now(UTC) + timedelta(hours=2)))
    assert row.id == future
    [due_now] = insert(dsn)
    [row] = await store.claim_due(claim())
    assert row.id == due_now
    # The lease is measured from the database's now.
    assert timedelta(0) < row.lease_expires_at - datetime.now(UTC) <= LEASE + timedelta(seconds=5)


async def test_claim_takes_the_earliest_due_rows_in_due_order_and_only_its_lane(
    dsn: str, store: PostgresStore
):
    minutes = [5, 1, 4, 1, 3, 2]
    ids = [insert(dsn, due=T0 - timedelta(minutes=m))[0] for m in minutes]
    insert(dsn, due=T0 - timedelta(hours=1), lane="webhook")
    rows = await store.claim_due(claim(limit=4, now=T0))
    # Oldest due first: the rows due 5, 4, 3 and 2 minutes ago.
    by_due = sorted(zip(minutes, ids, strict=True), key=lambda p: (-p[0], p[1]))
    assert [row.id for row in rows] == [i for _, i in by_due[:4]]
    rest = await store.claim_due(claim(limit=10, now=T0))
    assert [row.id for row in rest] == [ids[1], ids[3]]  # the tie, in id order
    assert all(row.lane == LANE for row in [*rows, *rest])


# --- marks ---------------------------------------------------------------------------------------


async def test_a_late_mark_from_an_expired_claim_is_stale_counted_and_never_applied(
    dsn: str, store: PostgresStore, caplog: pytest.LogCaptureFixture
):
    # Mutation lock: the claim-token fence in MARK. A's lease expired and B re-claimed the row;
    # the row is still pending, so only the token can tell A's late failure from B's claim.
    canary = f"canary-{secrets.token_hex(8)}"
    [row_id] = insert(dsn, due=T0, payload={"to": "a@example.org", "setup_url": canary})
    [a] = await store.claim_due(claim(now=T0))
    [b] = await store.claim_due(claim(now=T0 + LEASE))
    assert (a.id, b.id, b.attempts) == (row_id, row_id, 2)

    with caplog.at_level(logging.DEBUG, logger="outbox_adapters"):
        late = await store.mark_if_pending(Mark.failed(a, "550 mailbox unavailable"))
    assert late is MarkResult.STALE
    assert fetch(dsn, row_id)["status"] == "pending"
    assert await store.mark_if_pending(Mark.dispatched(b, scrub_keys=SECRETS)) is MarkResult.APPLIED

    stored = fetch(dsn, row_id)
    assert (stored["status"], stored["last_error"]) == ("dispatched", None)
    assert store.stats.stale_marks == 1
    # Counted durably for outbox stats by the mark statement itself; logged by the worker that
    # made it (once), never by the store.
    assert (await store.lane_stats())[LANE].stale_marks == 1
    assert caplog.records == []


async def test_a_stale_lean_mark_whose_count_meets_an_outage_is_counted_when_retried(
    dsn: str, store: PostgresStore, monkeypatch: pytest.MonkeyPatch
):
    # A dispatched mark takes the lean statement; when it matches nothing, a second statement
    # counts it. If that one loses its connection, the store reports an outage (the worker's
    # marker retries), and the retried mark is stale again and counted then: once.
    [row_id] = insert(dsn, due=T0)
    [a] = await store.claim_due(claim(now=T0))
    [b] = await store.claim_due(claim(now=T0 + LEASE))
    killed = "SELECT pg_terminate_backend(pg_backend_pid()) WHERE %(id)s::bigint IS NOT NULL"
    with monkeypatch.context() as patch:
        patch.setattr(statements, "COUNT_STALE", killed)
        with pytest.raises(StoreUnavailable):
            await store.mark_if_pending(Mark.dispatched(a, scrub_keys=SECRETS))
    assert (await store.lane_stats())[LANE].stale_marks == 0

    assert await store.mark_if_pending(Mark.dispatched(a, scrub_keys=SECRETS)) is MarkResult.STALE

    assert (await store.lane_stats())[LANE].stale_marks == 1
    stored = fetch(dsn, row_id)
    assert (stored["status"], stored["claim_token"]) == ("pending", b.token.value)


async def test_a_mark_on_a_resolved_row_is_stale_even_with_the_same_token(
    dsn: str, store: PostgresStore
):
    # Mutation lock: the status guard in MARK. The token still matches (a resolved row keeps it),
    # so only ``status = 'pending'`` stops a second mark from overwriting a delivered row.
    [row_id] = insert(dsn)
    [row] = await store.claim_due(claim())
    assert await store.mark_if_pending(Mark.dispatched(row, scrub_keys=SECRETS)) is (
        MarkResult.APPLIED
    )
    assert await store.mark_if_pending(Mark.failed(row, "a duplicate late failure")) is (
        MarkResult.STALE
    )
    stored = fetch(dsn, row_id)
    assert (stored["status"], stored["claim_token"]) == ("dispatched", row.token.value)
    assert store.stats.stale_marks == 1


async def test_a_retry_mark_sets_the_due_time_ends_the_claim_and_keeps_attempts(
    dsn: str, store: PostgresStore
):
    [row_id] = insert(dsn, due=T0)
    [row] = await store.claim_due(claim(now=T0))
    retry = Mark.retry(row, "421 try again later", delay=timedelta(minutes=15))
    before = db_now(dsn)
    assert await store.mark_if_pending(retry) is MarkResult.APPLIED
    stored = fetch(dsn, row_id)
    # Due 15 minutes after the mark in DATABASE time (not after the claim's injected T0).
    later = stored["next_attempt_at"]
    assert before + timedelta(minutes=15) <= later <= db_now(dsn) + timedelta(minutes=15)
    assert (stored["status"], stored["attempts"]) == ("pending", 1)
    assert (stored["claim_token"], stored["last_error"], stored["resolved_at"]) == (
        None,
        "421 try again later",
        None,
    )
    # The claim is over: a second mark under its token is stale.
    assert await store.mark_if_pending(Mark.failed(row, "late")) is MarkResult.STALE
    assert await store.claim_due(claim(now=later - timedelta(seconds=1))) == []
    [again] = await store.claim_due(claim(now=later))
    assert again.attempts == 2
    assert await store.mark_if_pending(Mark.failed(again, "550 no such user")) is (
        MarkResult.APPLIED
    )
    stored = fetch(dsn, row_id)
    assert (stored["status"], stored["attempts"], stored["last_error"]) == (
        "failed",
        2,
        "550 no such user",
    )
    assert stored["resolved_at"] is not None


async def test_dispatched_and_skipped_marks_scrub_exactly_the_secret_keys_in_the_same_update(
    dsn: str, store: PostgresStore
):
    # Mutation lock: the scrub in MARK. A canary placed in every payload survives only in rows that
    # are still pending or failed (RELIABILITY.md, security promise 1).
    canary = f"canary-{secrets.token_hex(8)}"

    def payload(n: int) -> dict[str, Any]:
        return {
            "to": f"user{n}@example.org",
            "invoice_number": f"INV-{n}",
            "setup_url": f"https://example.org/setup/{canary}",
            "pdf": canary,
            "public_token": canary,
            "details": {"setup_url": "nested keys are data, not scrubbed", "lines": [1, 2]},
        }

    ids = [insert(dsn, payload=payload(n))[0] for n in range(4)]
    dispatched, skipped, failed, pending = ids
    rows = {row.id: row for row in await store.claim_due(claim(limit=3))}
    marks = [
        Mark.dispatched(rows[dispatched], scrub_keys=SECRETS),
        Mark.skipped(rows[skipped], "recipient opted out", scrub_keys=SECRETS),
        Mark.failed(rows[failed], "550 mailbox unavailable"),
    ]
    for mark in marks:
        assert await store.mark_if_pending(mark) is MarkResult.APPLIED

    kept = {"to", "invoice_number", "details"}
    for n, row_id in enumerate(ids):
        stored = fetch(dsn, row_id)
        if row_id in (dispatched, skipped):
            assert stored["payload"] == {k: v for k, v in payload(n).items() if k in kept}
            assert stored["scrubbed_at"] is not None
        else:
            assert stored["payload"] == payload(n)
            assert stored["scrubbed_at"] is None
    with psycopg.connect(dsn, autocommit=True) as conn:
        holding = conn.execute(
            "SELECT id, status FROM outbox_message WHERE payload::text LIKE %s ORDER BY id",
            (f"%{canary}%",),
        ).fetchall()
    assert holding == [(failed, "failed"), (pending, "pending")]


async def test_scrub_keys_with_quotes_commas_braces_and_backslashes_are_scrubbed_exactly(
    dsn: str, store: PostgresStore
):
    # The scrub keys travel as one text[] literal made by the store (marks.text_array); a key that
    # array syntax treats specially must still name exactly that key, in MARK and in MARK_MANY.
    odd = frozenset({'a"b', "c,d", "{e}", "f\\g", " h ", "NULL", "é"})
    payload = dict.fromkeys(odd, "secret") | {"kept": 1, "NULL ": 2, "ab": 3}
    ids = [insert(dsn, payload=payload)[0] for _ in range(3)]
    rows = {row.id: row for row in await store.claim_due(claim(limit=3))}
    one, *group = (Mark.dispatched(rows[row_id], scrub_keys=odd) for row_id in ids)
    assert await store.mark_if_pending(one) is MarkResult.APPLIED
    assert await store.mark_many(group) == [MarkResult.APPLIED, MarkResult.APPLIED]
    for row_id in ids:
        assert fetch(dsn, row_id)["payload"] == {"kept": 1, "NULL ": 2, "ab": 3}


async def test_marks_never_change_attempts(dsn: str, store: PostgresStore):
    ids = insert(dsn, 3)
    rows = await store.claim_due(claim())
    await store.mark_if_pending(Mark.dispatched(rows[0], scrub_keys=frozenset()))
    await store.mark_if_pending(Mark.failed(rows[1], "bad payload"))
    await store.mark_if_pending(Mark.retry(rows[2], "timeout", delay=timedelta(hours=1)))
    assert [fetch(dsn, i)["attempts"] for i in ids] == [1, 1, 1]


# --- release -------------------------------------------------------------------------------------


async def test_release_gives_a_claimed_row_back_due_now_with_the_attempt_refunded(
    dsn: str, store: PostgresStore
):
    [row_id] = insert(dsn)
    [row] = await store.claim_due(claim())
    assert await store.release(row.id, row.token) is MarkResult.APPLIED
    stored = fetch(dsn, row_id)
    assert (stored["status"], stored["attempts"], stored["claim_token"]) == ("pending", 0, None)
    # Fenced: the claim is over, so a second release (or a mark) under its token is stale.
    assert await store.release(row.id, row.token) is MarkResult.STALE
    assert await store.mark_if_pending(Mark.dispatched(row, scrub_keys=SECRETS)) is (
        MarkResult.STALE
    )
    [again] = await store.claim_due(claim())
    assert (again.id, again.attempts) == (row_id, 1)
    assert await store.release(again.id, token()) is MarkResult.STALE


# --- requeue -------------------------------------------------------------------------------------


async def fail_rows(store: PostgresStore, dsn: str, errors: list[str]) -> list[int]:
    ids = insert(dsn, len(errors))
    rows = await store.claim_due(claim(limit=len(errors)))
    for row, error in zip(rows, errors, strict=True):
        assert await store.mark_if_pending(Mark.failed(row, error)) is MarkResult.APPLIED
    return ids


async def test_requeue_puts_a_failed_row_back_to_pending_with_attempts_reset_and_audits_it(
    dsn: str, store: PostgresStore
):
    [row_id] = await fail_rows(store, dsn, ["550 mailbox unavailable"])
    result = await store.requeue_failed(RequeueRequest(actor="ops@example.org", row_ids=(row_id,)))
    assert (result.requeued, dict(result.refused)) == ((row_id,), {})
    stored = fetch(dsn, row_id)
    assert (stored["status"], stored["attempts"], stored["last_error"]) == ("pending", 0, None)
    assert (stored["claim_token"], stored["resolved_at"]) == (None, None)
    with psycopg.connect(dsn, autocommit=True) as conn:
        audit = conn.execute(
            "SELECT message_id, actor, previous_attempts, previous_error FROM outbox_requeue_audit"
        ).fetchall()
    assert audit == [(row_id, "ops@example.org", 1, "550 mailbox unavailable")]
    [row] = await store.claim_due(claim())
    assert (row.id, row.attempts) == (row_id, 1)


async def test_requeue_refuses_sent_pending_and_unknown_rows_with_the_reason(
    dsn: str, store: PostgresStore
):
    sent, skipped, pending = insert(dsn, 3)
    rows = {row.id: row for row in await store.claim_due(claim(limit=2))}
    await store.mark_if_pending(Mark.dispatched(rows[sent], scrub_keys=SECRETS))
    await store.mark_if_pending(Mark.skipped(rows[skipped], "opted out", scrub_keys=SECRETS))
    result = await store.requeue_failed(
        RequeueRequest(actor="ops", row_ids=(sent, skipped, pending, 999_999, "not-an-id"))
    )
    assert result.requeued == ()
    assert "cannot be sent again" in result.refused[sent]
    assert "send a new message" in result.refused[sent]
    assert "cannot be sent again" in result.refused[skipped]
    assert "only failed rows can be requeued" in result.refused[pending]
    assert result.refused[999_999] == NO_SUCH_ROW
    assert result.refused["not-an-id"] == NO_SUCH_ROW
    assert fetch(dsn, sent)["status"] == "dispatched"
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM outbox_requeue_audit").fetchone() == (0,)


async def test_requeue_by_filter_takes_failed_rows_by_lane_time_and_error(
    dsn: str, store: PostgresStore
):
    old, new, other = await fail_rows(store, dsn, ["550 no such user", "550 no such user", "bad"])
    with psycopg.connect(dsn, autocommit=True) as conn:
        for row_id, at in ((old, T0 - timedelta(days=2)), (new, T0), (other, T0)):
            conn.execute("UPDATE outbox_message SET resolved_at = %s WHERE id = %s", (at, row_id))
    since = await store.requeue_failed(
        RequeueRequest(actor="ops", failed_since=T0 - timedelta(days=1), error_contains="no such")
    )
    assert (since.requeued, dict(since.refused)) == ((new,), {})
    before = await store.requeue_failed(
        RequeueRequest(actor="ops", lane=LANE, failed_before=T0 - timedelta(days=1))
    )
    assert before.requeued == (old,)
    nothing = await store.requeue_failed(RequeueRequest(actor="ops", lane="webhook"))
    assert nothing.requeued == ()
    assert fetch(dsn, other)["status"] == "failed"


# --- operator reads ------------------------------------------------------------------------------


async def test_operator_reads_list_failed_rows_group_errors_and_count(
    dsn: str, store: PostgresStore
):
    ids = await fail_rows(store, dsn, ["550 no such user", "550 no such user", "bad payload"])
    insert(dsn, 2)
    report = await store.list_failed(lane=LANE, limit=2)
    assert len(report.rows) == 2
    assert {row.status for row in report.rows} == {Status.FAILED}
    assert [(g.error, g.rows) for g in report.by_error] == [
        ("550 no such user", 2),
        ("bad payload", 1),
    ]
    assert await store.counts() == {LANE: {Status.FAILED: 3, Status.PENDING: 2}}
    got = await store.get(ids[0])
    assert got is not None
    assert (got.id, got.status, got.attempts) == (ids[0], Status.FAILED, 1)
    assert await store.get(123_456_789) is None


# --- schema --------------------------------------------------------------------------------------


def test_the_ddl_is_idempotent_and_verify_names_what_is_missing(postgres_dsn: str):
    # A schema of its own, so dropping things here can't disturb the other tests' tables.
    name = f"verify_{secrets.token_hex(4)}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {name}")
    private = psycopg.conninfo.make_conninfo(postgres_dsn, options=f"-c search_path={name}")
    try:
        assert schema.verify(private) == [
            "table outbox_channel_parked is missing",
            "table outbox_event is missing",
            "table outbox_heartbeat is missing",
            "table outbox_leader is missing",
            "table outbox_message is missing",
            "table outbox_notification is missing",
            "table outbox_requeue_audit is missing",
            "table outbox_stale_marks is missing",
            "table outbox_webhook is missing",
            "table outbox_webhook_endpoint is missing",
            "table outbox_webhook_event is missing",
            "table outbox_webhook_delivery is missing",
            "table outbox_webhook_secret is missing",
        ]
        # Every statement creates only what is missing; a trigger's function is replaced (ADR 0022).
        for statement in schema.ddl_statements():
            assert "IF NOT EXISTS" in statement or statement.startswith(
                "CREATE OR REPLACE FUNCTION"
            ), statement
        schema.apply(private)
        schema.apply(private)
        assert schema.verify(private) == []
        with psycopg.connect(private, autocommit=True) as conn:
            conn.execute("DROP INDEX ix_outbox_message_due")
            conn.execute("ALTER TABLE outbox_message DROP COLUMN scrubbed_at")
            conn.execute("ALTER TABLE outbox_leader DROP CONSTRAINT ck_outbox_leader_term")
            reloptions = conn.execute(
                "SELECT reloptions FROM pg_class WHERE oid = 'outbox_message'::regclass"
            ).fetchone()
        assert reloptions is not None
        assert "fillfactor=80" in reloptions[0]
        assert schema.verify(private) == [
            "check constraint ck_outbox_leader_term on outbox_leader is missing",
            "column outbox_message.scrubbed_at is missing",
            "index ix_outbox_message_due on outbox_message is missing",
        ]
    finally:
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {name} CASCADE")


# --- retries in database time ----------------------------------------------------------------------


class _Transient:
    """A handler whose every send fails transiently."""

    async def __call__(self, row: ClaimedRow, *, budget: timedelta) -> Outcome:
        return Outcome.transient("421 4.3.2 try later")


async def test_a_worker_whose_clock_is_an_hour_off_still_schedules_the_retry_in_database_time(
    dsn: str, store: PostgresStore
):
    # The worker's wall clock runs an hour ahead of the database's. The claim's lease is stamped
    # in database time already; the retry's due time must be too (the mark carries the delay, the
    # statement adds it to now()), or this row would sleep an hour longer than its schedule says,
    # and with a clock an hour behind it would be due again at once.
    [row_id] = insert(dsn)
    for skew in (timedelta(hours=1), -timedelta(hours=1)):
        clock = FakeClock(datetime.now(UTC) + skew)
        schedule = SlotSchedule((timedelta(minutes=10),) * 2, jitter_ratio=0.0)
        config = email_lane(lane=LANE, backoff=schedule, poll_interval=0.05)
        worker = Worker(store, _Transient(), config, clock=clock, jitter=lambda: 0.5)
        before = db_now(dsn)
        report = await worker.run_once()
        await worker.wait_for_marks()
        after = db_now(dsn)

        assert report.claimed == 1
        stored = fetch(dsn, row_id)
        assert stored["status"] == "pending"
        due = stored["next_attempt_at"]
        assert before + timedelta(minutes=10) <= due <= after + timedelta(minutes=10), skew
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "UPDATE outbox_message SET next_attempt_at = now() WHERE id = %s", (row_id,)
            )


# --- outages and configuration ---------------------------------------------------------------------


async def test_a_lost_connection_is_store_unavailable_with_the_cause_chained_and_no_row_data(
    dsn: str, store: PostgresStore
):
    canary = f"canary-{secrets.token_hex(8)}"
    [row_id] = insert(dsn, payload={"to": "a@example.org", "setup_url": canary})
    [row] = await store.claim_due(claim())  # the store keeps this connection for the next mark
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            " AND backend_type = 'client backend'"
        )
    with pytest.raises(StoreUnavailable, match="during mark_if_pending") as raised:
        await store.mark_if_pending(Mark.failed(row, f"550 {canary}"))
    assert isinstance(raised.value.__cause__, psycopg.OperationalError)
    # The core's type only: the runtime retries StoreUnavailable and never matches driver classes.
    assert not isinstance(raised.value, psycopg.Error)
    assert canary not in str(raised.value)
    assert row.token.value not in str(raised.value)
    # The pool discards dead connections as they come back: a retry of the same mark lands (the
    # worker retries StoreUnavailable within the mark's budget).
    for _ in range(10):
        try:
            result = await store.mark_if_pending(Mark.failed(row, "550"))
        except StoreUnavailable:
            continue
        break
    assert result is MarkResult.APPLIED
    assert fetch(dsn, row_id)["status"] == "failed"


async def test_a_statement_error_is_not_an_outage_and_propagates_as_it_is(
    postgres_dsn: str,
):
    # A database without the outbox tables: a bug or a missing migration, not an outage.
    lost_dsn = psycopg.conninfo.make_conninfo(postgres_dsn, options="-c search_path=nowhere")
    async with await PostgresStore.open(lost_dsn, max_size=1) as lost:
        with pytest.raises(psycopg.errors.UndefinedTable):
            await lost.get(1)


def test_a_store_takes_only_a_table_queue_table_built(dsn: str) -> None:
    plain = Table("outbox_message_copy", MetaData(), Column("id", BigInteger, primary_key=True))
    with pytest.raises(ConfigurationError, match=r"not built by .*queue_table"):
        PostgresStore(None, table=plain)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="a sqlalchemy Table"):
        PostgresStore(None, table="outbox_message")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="queue table name"):
        queue_table('deliveries"; DROP TABLE x; --', MetaData())
    with pytest.raises(ConfigurationError, match="payload are queue columns"):
        queue_table("deliveries_x", MetaData(), Column("payload", Text))


async def test_a_queue_table_s_own_columns_survive_every_statement(postgres_dsn: str) -> None:
    meta = MetaData()
    deliveries = queue_table(
        f"deliveries_{secrets.token_hex(3)}", meta, Column("endpoint_id", BigInteger)
    )
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(str(CreateTable(deliveries).compile(dialect=postgresql.dialect())))
        [row_id] = conn.execute(
            psycopg.sql.SQL(
                "INSERT INTO {} (lane, payload, endpoint_id) VALUES ('hooks', '{{}}', 77)"
                " RETURNING id"
            ).format(psycopg.sql.Identifier(deliveries.name))
        ).fetchone() or (None,)
    async with await PostgresStore.open(postgres_dsn, table=deliveries, max_size=2) as other:
        [row] = await other.claim_due(claim(lane="hooks"))
        assert row.id == row_id
        assert await other.mark_if_pending(Mark.failed(row, "410 gone")) is MarkResult.APPLIED
        requeued = await other.requeue_failed(RequeueRequest("ops", row_ids=(row_id,)))
        assert requeued.requeued == (row_id,)
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        kept = conn.execute(
            psycopg.sql.SQL("SELECT endpoint_id, status FROM {}").format(
                psycopg.sql.Identifier(deliveries.name)
            )
        ).fetchall()
        audit = conn.execute(
            "SELECT queue FROM outbox_requeue_audit WHERE message_id = %s AND queue = %s",
            (row_id, deliveries.name),
        ).fetchall()
        conn.execute(
            psycopg.sql.SQL("DROP TABLE {}").format(psycopg.sql.Identifier(deliveries.name))
        )
    assert kept == [(77, "pending")]
    assert audit == [(deliveries.name,)]
