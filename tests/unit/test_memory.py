"""The in-memory adapters' own promises, beyond the contract suite (tests/contract): the clock they
take, isolation of the state they hold, thread safety, and the recording peers' scripting."""

from __future__ import annotations

import asyncio
import logging
import secrets
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from outbox_adapters.clock import FakeClock
from outbox_adapters.memory import (
    MemoryLeaderLease,
    MemoryStore,
    RecordingHandler,
    RecordingMailer,
)
from outbox_core.delivery import Status
from outbox_core.mail import OutgoingMail, build_message
from outbox_core.messages import ClaimedRow, ClaimToken, Mark, NewMessage
from outbox_core.outcomes import Outcome, OutcomeKind
from outbox_core.ports import ClaimRequest, Mailer, MarkResult, RequeueRequest, RowHandler

START = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
LEASE = timedelta(seconds=60)
BUDGET = timedelta(seconds=30)


def token() -> ClaimToken:
    return ClaimToken.from_entropy(secrets.token_bytes(16))


def claim(now: datetime | None = None) -> ClaimRequest:
    return ClaimRequest("email", 10, LEASE, token(), now=now)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def store(clock: FakeClock) -> MemoryStore:
    return MemoryStore(clock)


# --- MemoryStore ----------------------------------------------------------------------------------


async def test_the_store_stamps_with_its_clock_unless_told_otherwise(store, clock):
    first = store.enqueue(NewMessage("email", {"n": 1}))
    second = store.enqueue(NewMessage("email", {"n": 2}), now=START - timedelta(hours=1))
    (a, b) = store.rows("email")
    assert (a.id, a.created_at, a.next_attempt_at) == (first.row_id, START, START)
    assert (b.id, b.created_at) == (second.row_id, START - timedelta(hours=1))

    clock.advance(5)
    rows = await store.claim_due(claim())
    assert [r.lease_expires_at for r in rows] == [START + timedelta(seconds=5) + LEASE] * 2

    clock.advance(5)
    assert await store.mark_if_pending(Mark.failed(rows[0], "550 rejected")) is MarkResult.APPLIED
    failed = await store.get(rows[0].id)
    assert failed is not None
    assert failed.resolved_at == START + timedelta(seconds=10)

    clock.advance(5)
    await store.requeue_failed(RequeueRequest(actor="ops", row_ids=(rows[0].id,)))
    assert store.audit[0].requeued_at == START + timedelta(seconds=15)
    requeued = await store.get(rows[0].id)
    assert requeued is not None
    assert requeued.next_attempt_at == START + timedelta(seconds=15)


async def test_rows_lists_what_was_enqueued_per_lane_oldest_first(store):
    store.enqueue(NewMessage("email", {"to": "a@example.org"}))
    store.enqueue(NewMessage("webhook", {"url": "https://example.org/hook"}))
    store.enqueue(NewMessage("email", {"to": "b@example.org"}))
    assert [r.payload["to"] for r in store.rows("email")] == ["a@example.org", "b@example.org"]
    assert [r.lane for r in store.rows()] == ["email", "webhook", "email"]
    assert all(r.status is Status.PENDING for r in store.rows())


async def test_no_caller_can_change_stored_state_through_a_payload_it_holds(store):
    payload: dict[str, Any] = {"to": "a@example.org", "items": [1]}
    row_id = store.enqueue(NewMessage("email", payload)).row_id
    payload["items"].append(2)
    (claimed,) = await store.claim_due(claim())
    claimed.payload["items"].append(3)
    shown = await store.get(row_id)
    assert shown is not None
    shown.payload["items"].append(4)
    again = await store.get(row_id)
    assert again is not None
    assert again.payload == {"to": "a@example.org", "items": [1]}


async def test_every_call_lets_other_tasks_run_first(store):
    ran: list[str] = []

    async def other() -> None:
        ran.append("other")

    task = asyncio.create_task(other())
    await store.claim_due(claim())
    assert ran == ["other"]
    await task


def test_concurrent_enqueues_from_threads_honour_the_idempotency_key(store):
    results = []
    barrier = threading.Barrier(8)

    def produce() -> None:
        barrier.wait()
        results.append(store.enqueue(NewMessage("email", {"n": 1}, idempotency_key="once")))

    threads = [threading.Thread(target=produce) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(r.created for r in results) == 1
    assert len({r.row_id for r in results}) == 1
    assert len(store.rows()) == 1


async def test_a_stale_mark_is_counted_not_logged_by_the_store(store, caplog):
    row_id = store.enqueue(NewMessage("email", {"setup_url": "https://x/CANARY-7f3a"})).row_id
    (row,) = await store.claim_due(claim())
    stranger = ClaimedRow(
        id=row.id,
        lane=row.lane,
        payload=row.payload,
        attempts=1,
        token=token(),
        lease_expires_at=row.lease_expires_at,
        created_at=row.created_at,
    )
    with caplog.at_level(logging.DEBUG, logger="outbox_adapters"):
        assert await store.mark_if_pending(Mark.failed(stranger, "x")) is MarkResult.STALE
    # The worker that made the mark logs it, once; the store only counts it (for outbox stats).
    assert caplog.records == []
    assert store.stats.stale_marks == 1
    assert (await store.lane_stats())["email"].stale_marks == 1
    stored = await store.get(row_id)
    assert stored is not None
    assert stored.status is Status.PENDING


async def test_unusable_row_ids_are_refused_like_postgresql_does(store):
    with pytest.raises(ValueError, match="integer"):
        await store.get("abc")
    with pytest.raises(TypeError, match="row id"):
        await store.get(True)
    row_id = store.enqueue(NewMessage("email", {"n": 1})).row_id
    shown = await store.get(str(row_id))
    assert shown is not None
    assert shown.id == row_id


# --- MemoryLeaderLease ----------------------------------------------------------------------------


async def test_the_leader_lease_uses_its_clock_when_no_time_is_given(clock):
    lease = MemoryLeaderLease(clock)
    term = await lease.try_acquire("email", "a", ttl=timedelta(seconds=30))
    assert term is not None
    assert term.trusted_until == clock.monotonic() + 30
    clock.advance(29)
    assert await lease.try_acquire("email", "b", ttl=timedelta(seconds=30)) is None
    clock.advance(1)
    taken = await lease.try_acquire("email", "b", ttl=timedelta(seconds=30))
    assert taken is not None
    assert taken.term == 2
    await lease.release(taken)
    again = await lease.try_acquire("email", "a", ttl=timedelta(seconds=30))
    assert again is not None
    assert again.term == 3


# --- RecordingMailer ------------------------------------------------------------------------------


def mail(*to: str, n: int = 1) -> OutgoingMail:
    return build_message(
        sender="billing@example.org",
        to=to,
        subject=f"Invoice {n}",
        text="Hello",
        message_id=f"<m{n}@example.org>",
        date=START,
    )


async def test_the_mailer_records_every_send_and_reports_sent_by_default():
    mailer: Mailer = RecordingMailer()
    assert isinstance(mailer, RecordingMailer)
    outcome = await mailer.send(mail("a@example.org"), budget=BUDGET)
    assert outcome == Outcome.sent()
    (attempt,) = mailer.attempts
    assert (attempt.mail.recipients, attempt.budget, attempt.outcome) == (
        ("a@example.org",),
        BUDGET,
        Outcome.sent(),
    )
    assert mailer.sent == [attempt.mail]


async def test_scripted_results_are_used_once_each_in_order_then_the_default():
    mailer = RecordingMailer(default=Outcome.transient("451 try later"))
    mailer.script(Outcome.sent(), Outcome.permanent("550 no such user"))
    kinds = [(await mailer.send(mail("a@example.org", n=n), budget=BUDGET)).kind for n in range(3)]
    assert kinds == [OutcomeKind.SENT, OutcomeKind.PERMANENT, OutcomeKind.TRANSIENT]
    assert [m.message_id for m in mailer.sent] == ["<m0@example.org>"]


async def test_a_recipients_script_wins_and_matches_the_normalised_address():
    mailer = RecordingMailer()
    mailer.script(Outcome.transient("451 busy"))
    mailer.script_recipient("Bob@EXAMPLE.org", Outcome.permanent("550 suppressed"))
    to_bob = await mailer.send(mail("Bob@example.org"), budget=BUDGET)
    to_alice = await mailer.send(mail("alice@example.org"), budget=BUDGET)
    assert (to_bob.kind, to_alice.kind) == (OutcomeKind.PERMANENT, OutcomeKind.TRANSIENT)
    assert mailer.count() == 2
    assert mailer.count("Bob@Example.ORG") == 1  # the domain is case-blind, the local part not
    assert mailer.count("bob@example.org") == 0


async def test_a_scripted_exception_is_raised_and_recorded():
    mailer = RecordingMailer()
    boom = ConnectionResetError("peer reset")
    mailer.script(boom)
    with pytest.raises(ConnectionResetError):
        await mailer.send(mail("a@example.org"), budget=BUDGET)
    (attempt,) = mailer.attempts
    assert (attempt.outcome, attempt.error) == (None, boom)
    assert mailer.sent == []


async def test_a_scripted_callable_decides_when_the_send_ends():
    mailer = RecordingMailer()
    release = asyncio.Event()

    async def held() -> Outcome:
        await release.wait()
        return Outcome.sent()

    mailer.script(held)
    sending = asyncio.create_task(mailer.send(mail("a@example.org"), budget=BUDGET))
    await asyncio.sleep(0)
    assert not sending.done()
    assert mailer.attempts == []
    release.set()
    assert (await sending).kind is OutcomeKind.SENT
    assert len(mailer.attempts) == 1


# --- RecordingHandler -----------------------------------------------------------------------------


def claimed(row_id: int) -> ClaimedRow:
    return ClaimedRow(
        id=row_id,
        lane="email",
        payload={},
        attempts=1,
        token=token(),
        lease_expires_at=START + LEASE,
        created_at=START,
    )


async def test_the_handler_records_rows_and_plays_scripts_per_row_then_in_order():
    handler: RowHandler = RecordingHandler()
    assert isinstance(handler, RecordingHandler)
    handler.script(Outcome.transient("timeout"))
    handler.script_row(2, Outcome.skipped("opted out"), ValueError("bad payload"))
    first = await handler(claimed(2), budget=BUDGET)
    with pytest.raises(ValueError, match="bad payload"):
        await handler(claimed(2), budget=BUDGET)
    third = await handler(claimed(1), budget=BUDGET)
    fourth = await handler(claimed(1), budget=BUDGET)
    assert [o.kind for o in (first, third, fourth)] == [
        OutcomeKind.SKIPPED,
        OutcomeKind.TRANSIENT,
        OutcomeKind.SENT,
    ]
    assert [c.row.id for c in handler.calls] == [2, 2, 1, 1]
    assert isinstance(handler.calls[1].error, ValueError)
    assert (handler.count(), handler.count(2)) == (4, 2)


async def test_an_injected_time_must_be_timezone_aware(store):
    naive = datetime(2026, 3, 1, 9, 0)  # noqa: DTZ001
    with pytest.raises(ValueError, match="timezone-aware"):
        store.enqueue(NewMessage("email", {"n": 1}), now=naive)
    with pytest.raises(ValueError, match="timezone-aware"):
        await MemoryLeaderLease().try_acquire("email", "a", ttl=timedelta(seconds=1), now=naive)
    assert store.rows() == []
