"""The store contract: what every OutboxStore promises, run against the memory store AND PostgreSQL.

Each test takes the ``harness`` fixture (tests/contract/conftest.py), so it runs once per store. The
cases follow ADR 0004 and ADR 0006: claim-lease (C3), fenced marks with the scrub in the same
write (C6, C10), release, guarded and audited requeue (A1),
the producer's idempotency key and its payload refusals.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any

import pytest
from psycopg_pool import AsyncConnectionPool
from tests.support.contract import (
    LANE,
    LEASE,
    SECRETS,
    VIA,
    apply,
    claim,
    claim_one,
    new_token,
)
from tests.support.telemetry import context_of, recording

from outbox_adapters.postgres.clock import DatabaseClock
from outbox_adapters.postgres.enqueue import enqueue_async
from outbox_adapters.postgres.store import PostgresStore
from outbox_adapters.store_rules import MAX_PAYLOAD_BYTES
from outbox_core.delivery import Status
from outbox_core.errors import InvalidPayload, StoreUnavailable
from outbox_core.messages import ClaimedRow, Mark, NewMessage
from outbox_core.payload import MAX_DEPTH, decode_payload, validate_payload
from outbox_core.ports import (
    MarkResult,
    OperatorStore,
    OutboxStore,
    RequeueRequest,
)

OTHER_LANE = "webhook"
TICK = timedelta(microseconds=1)
ACTOR = "ops@example.org"


def message(lane: str = LANE, **payload: Any) -> NewMessage:
    return NewMessage(lane, payload or {"to": "alice@example.org"})


async def enqueue_ids(h, count: int, *, lane: str = LANE, due: datetime | None = None) -> list[int]:
    return [
        (await h.enqueue(NewMessage(lane, {"n": n}, not_before=due))).row_id for n in range(count)
    ]


async def failed_row(h, reason: str, *, lane: str = LANE) -> int:
    """A row enqueued, claimed and marked failed with ``reason`` (no other row may be due)."""
    row_id: int = (await h.enqueue(message(lane))).row_id
    row = await claim_one(h, row_id, lane=lane)
    assert await h.store.mark_if_pending(Mark.failed(row, reason)) is MarkResult.APPLIED
    return row_id


async def dispatched_row(h, *, lane: str = LANE) -> int:
    row_id: int = (await h.enqueue(message(lane))).row_id
    row = await claim_one(h, row_id, lane=lane)
    mark = Mark.dispatched(row, scrub_keys=SECRETS)
    assert await h.store.mark_if_pending(mark) is MarkResult.APPLIED
    return row_id


# --- the port -------------------------------------------------------------------------------------


async def test_store_satisfies_the_ports(harness):
    assert isinstance(harness.store, OutboxStore)
    assert isinstance(harness.store, OperatorStore)


async def test_enqueue_then_claim_returns_the_row_with_one_attempt_and_the_token(harness):
    h = harness
    payload = {"to": "alice@example.org", "invoice_number": "INV-7"}
    result = await h.enqueue(NewMessage(LANE, payload))
    assert result.created
    token = new_token()

    rows = await h.store.claim_due(claim(h.now, token=token))

    assert len(rows) == 1
    row = rows[0]
    assert (row.id, row.lane, row.payload, row.attempts) == (result.row_id, LANE, payload, 1)
    assert row.token == token
    assert row.lease_expires_at == h.now + LEASE
    assert row.created_at <= h.now
    stored = await h.store.get(result.row_id)
    assert stored is not None
    assert (stored.status, stored.attempts, stored.claim_token) == (Status.PENDING, 1, token.value)
    assert stored.claimed_at == h.now
    assert stored.next_attempt_at == h.now + LEASE


async def test_payload_comes_back_as_it_was_enqueued(harness):
    h = harness
    sent = {"items": [1, 2], "nested": {"none": None, "ratio": 1.5, "flag": True}, "text": "é"}
    await h.enqueue(NewMessage(LANE, sent))
    (row,) = await h.store.claim_due(claim(h.now))
    assert row.payload == sent


# Rows written around enqueue, as JSON text in PostgreSQL's own spelling (jsonb::text), so both
# stores hand back the same text: not objects, and objects Python can't read (nesting past the
# recursion limit, an integer longer than sys.get_int_max_str_digits()).
UNDECODABLE = {
    "string": ('"to: alice@example.org"', "is a JSON string, not a JSON object"),
    "number": ("42", "is a JSON number, not a JSON object"),
    "null": ("null", "is a JSON null, not a JSON object"),
    "array": ('["alice@example.org"]', "is a JSON array, not a JSON object"),
    "too-deep": ('{"x": ' + "[" * 3000 + "]" * 3000 + "}", "nests too deep to decode"),
    "huge-integer": ('{"n": ' + "9" * 5000 + "}", "cannot be decoded (Exceeds the limit"),
}


async def test_a_row_that_cannot_be_decoded_comes_back_as_its_text_and_never_fails_the_claim(
    harness,
):
    h = harness
    before = (await h.enqueue(message(n="before"))).row_id
    raw = {name: await h.insert_raw(LANE, text) for name, (text, _) in UNDECODABLE.items()}
    after = (await h.enqueue(message(n="after"))).row_id

    rows = await h.store.claim_due(claim(h.now, limit=20))

    by_id = {row.id: row for row in rows}
    assert [row.id for row in rows] == [before, *raw.values(), after]  # claim order holds
    assert by_id[before].payload == {"n": "before"}
    assert by_id[after].payload == {"n": "after"}
    for name, row_id in raw.items():
        text, reason = UNDECODABLE[name]
        assert by_id[row_id].payload == text, name  # the stored text, for the worker to refuse
        with pytest.raises(InvalidPayload, match=re.escape(reason)):
            decode_payload(by_id[row_id].payload)
        assert by_id[row_id].attempts == 1


@pytest.mark.parametrize("name", ["string", "number", "null", "array", "too-deep"])
async def test_a_row_that_is_not_an_object_still_takes_every_mark(harness, name):
    h = harness
    text, _ = UNDECODABLE[name]
    row_id = await h.insert_raw(LANE, text)
    row = await claim_one(h, row_id)
    # A dispatched mark scrubs: an object loses its secret keys, anything else stays as it is.
    assert await h.store.mark_if_pending(Mark.dispatched(row, scrub_keys=SECRETS)) is (
        MarkResult.APPLIED
    )
    failed_id = await h.insert_raw(LANE, text)
    failed = await claim_one(h, failed_id)
    assert await h.store.mark_if_pending(Mark.failed(failed, "undeliverable")) is (
        MarkResult.APPLIED
    )
    assert (await h.store.counts())[LANE] == {Status.DISPATCHED: 1, Status.FAILED: 1}
    stored = await h.store.get(row_id)
    assert stored is not None
    # Not an object, so get() hands back the stored JSON text rather than failing (an operator
    # must be able to list a poison row); and the mark kept it: there were no keys to remove.
    assert isinstance(stored.payload, str)
    if name != "too-deep":  # Python's json can't read that one back
        assert json.loads(stored.payload) == json.loads(text)


def nested(depth: int) -> dict[str, Any]:
    """A payload ``depth`` containers deep, itself included (dicts and lists in turn)."""
    inner: object = {}
    for level in range(depth - 2):
        inner = [inner] if level % 2 else {"level": inner}
    return {"top": inner}


def contains_itself() -> dict[str, Any]:
    payload: dict[str, Any] = {}
    payload["me"] = payload
    return payload


#: (payload, a word the refusal must name). The rule is the core's (validate_payload); what this
#: list proves is that both stores apply it, whole, before writing.
REFUSED_PAYLOADS: dict[str, tuple[Any, str]] = {
    "NaN": ({"ratio": math.nan}, "ratio"),
    "infinity": ({"ratios": [1.0, -math.inf]}, "ratios"),
    "a non-string key": ({1: "integer key"}, "key"),
    "a nested non-string key": ({"n": {None: "none"}}, "key"),
    "a NUL character": ({"name": "nul\x00byte"}, "U+0000"),
    "a NUL in a key": ({"na\x00me": "x"}, "U+0000"),
    "a lone surrogate": ({"name": "half \ud800 a pair"}, "U+D800"),
    "a datetime": ({"when": datetime(2026, 1, 1)}, "datetime"),  # noqa: DTZ001
    "a set": ({"tags": {"a", "b"}}, "set"),
    "a tuple": ({"items": (1, 2)}, "tuple"),
    "bytes": ({"pdf": b"%PDF"}, "bytes"),
    "too deep": (nested(MAX_DEPTH + 1), str(MAX_DEPTH)),
    "itself inside": (contains_itself(), str(MAX_DEPTH)),
    "one byte too large": ({"blob": "x" * (MAX_PAYLOAD_BYTES - 10)}, f"{MAX_PAYLOAD_BYTES:,}"),
}


def core_refusal(payload: object) -> str:
    with pytest.raises(InvalidPayload) as refusal:
        validate_payload(payload, max_bytes=MAX_PAYLOAD_BYTES)
    return str(refusal.value)


@pytest.mark.parametrize("case", REFUSED_PAYLOADS)
async def test_enqueue_refuses_what_the_core_refuses_with_the_core_s_reason(harness, case):
    payload, named = REFUSED_PAYLOADS[case]
    with pytest.raises(InvalidPayload) as refusal:
        await harness.enqueue(NewMessage(LANE, payload))
    # The same sentence as the core's, word for word: one rule, not two that happen to agree.
    assert str(refusal.value) == core_refusal(payload)
    assert named in str(refusal.value)
    assert await harness.store.counts() == {}


#: The edges of that rule, which both stores must accept and keep as given.
ACCEPTED_PAYLOADS = {
    # {"blob":"..."} is 11 bytes of JSON around the string.
    "exactly the size limit": {"blob": "x" * (MAX_PAYLOAD_BYTES - 11)},
    "exactly the depth limit": nested(MAX_DEPTH),
    "every JSON type": {
        "s": "é ☃ 𝄞",
        "i": -(2**53),
        "f": 0.1,
        "t": True,
        "n": None,
        "l": [],
        "d": {},
    },
}


@pytest.mark.parametrize("case", ACCEPTED_PAYLOADS)
async def test_enqueue_accepts_the_edges_of_the_rule(harness, case):
    payload = ACCEPTED_PAYLOADS[case]
    result = await harness.enqueue(NewMessage(LANE, payload))
    stored = await harness.store.get(result.row_id)
    assert stored is not None
    assert stored.payload == payload


async def test_any_mapping_is_a_payload_not_only_a_dict(harness):
    # NewMessage takes a Mapping; a read-only one is as good as a dict.
    result = await harness.enqueue(NewMessage(LANE, MappingProxyType({"to": "a@example.org"})))
    stored = await harness.store.get(result.row_id)
    assert stored is not None
    assert stored.payload == {"to": "a@example.org"}


async def test_idempotency_key_makes_a_second_enqueue_a_no_op_that_says_so(harness):
    h = harness
    first = await h.enqueue(NewMessage(LANE, {"v": 1}, idempotency_key="invoice-42"))
    again = await h.enqueue(NewMessage(LANE, {"v": 2}, idempotency_key="invoice-42"))
    other_lane = await h.enqueue(NewMessage(OTHER_LANE, {"v": 3}, idempotency_key="invoice-42"))
    keyless = [await h.enqueue(NewMessage(LANE, {"v": 4})) for _ in range(2)]

    assert first.created
    assert not again.created
    assert again.row_id == first.row_id
    assert other_lane.created
    assert other_lane.row_id != first.row_id
    assert all(r.created for r in keyless)
    assert keyless[0].row_id != keyless[1].row_id
    stored = await h.store.get(first.row_id)
    assert stored is not None
    assert stored.payload == {"v": 1}
    assert stored.idempotency_key == "invoice-42"
    assert await h.store.counts() == {LANE: {Status.PENDING: 3}, OTHER_LANE: {Status.PENDING: 1}}


# --- claim ----------------------------------------------------------------------------------------


async def test_claim_takes_due_rows_of_its_lane_in_due_order_up_to_the_limit(harness):
    h = harness
    at = h.now
    late = await enqueue_ids(h, 1, due=at - timedelta(seconds=10))
    early = await enqueue_ids(h, 1, due=at - timedelta(seconds=30))
    middle = await enqueue_ids(h, 1, due=at - timedelta(seconds=20))
    not_yet = await enqueue_ids(h, 1, due=at + timedelta(seconds=5))
    await enqueue_ids(h, 2, lane=OTHER_LANE, due=at - timedelta(seconds=60))

    first = await h.store.claim_due(claim(at, limit=2))
    rest = await h.store.claim_due(claim(at, limit=10))
    future = await h.store.claim_due(claim(at + timedelta(seconds=5)))

    assert [r.id for r in first] == early + middle
    assert [r.id for r in rest] == late
    assert [r.id for r in future] == not_yet
    assert {r.lane for r in [*first, *rest, *future]} == {LANE}


async def test_rows_due_at_the_same_time_are_claimed_in_id_order(harness):
    due = harness.now - timedelta(seconds=1)
    ids = await enqueue_ids(harness, 5, due=due)
    rows = await harness.store.claim_due(claim(harness.now))
    assert [r.id for r in rows] == sorted(ids)


async def test_claim_without_now_uses_the_stores_own_clock(harness):
    h = harness
    due_now = (await h.enqueue(message())).row_id
    # h.now is an hour after the store's clock, so this row is not due by the store's clock yet.
    await h.enqueue(NewMessage(LANE, {"n": 1}, not_before=h.now))
    rows = await h.store.claim_due(claim(None))
    assert [r.id for r in rows] == [due_now]


async def test_a_claimed_row_is_not_claimable_again_until_its_lease_ends(harness):
    h = harness
    row_id = (await h.enqueue(message())).row_id
    first = await claim_one(h, row_id)

    during = await h.store.claim_due(claim(h.now + LEASE - TICK))
    after = await h.store.claim_due(claim(h.now + LEASE))

    assert during == []
    assert [r.id for r in after] == [row_id]
    assert after[0].attempts == 2
    assert after[0].token != first.token
    assert after[0].lease_expires_at == h.now + 2 * LEASE


async def test_concurrent_claimers_take_disjoint_rows(harness):
    ids = await enqueue_ids(harness, 10)
    batches = await asyncio.gather(
        *(harness.store.claim_due(claim(harness.now, limit=4)) for _ in range(4))
    )
    claimed = [row.id for batch in batches for row in batch]
    assert sorted(claimed) == sorted(ids)  # each row exactly once, none left behind
    assert all(row.attempts == 1 for batch in batches for row in batch)


# --- marks ----------------------------------------------------------------------------------------


@VIA
async def test_dispatched_mark_scrubs_exactly_the_scrub_keys_and_keeps_the_rest(harness, via):
    h = harness
    payload = {
        "to": "alice@example.org",
        "invoice_number": "INV-7",
        "setup_url": "https://example.org/setup/SECRET",
        "pdf": "JVBERi0xLjQK",
        "public_token": "not in this mark's scrub keys",
        "nested": {"setup_url": "a nested key is the host's data"},
    }
    row_id = (await h.enqueue(NewMessage(LANE, payload))).row_id
    row = await claim_one(h, row_id)

    result = await apply(h, via, Mark.dispatched(row, scrub_keys=SECRETS))

    assert result is MarkResult.APPLIED
    stored = await h.store.get(row_id)
    assert stored is not None
    assert stored.status is Status.DISPATCHED
    assert stored.payload == {
        "to": "alice@example.org",
        "invoice_number": "INV-7",
        "public_token": "not in this mark's scrub keys",
        "nested": {"setup_url": "a nested key is the host's data"},
    }
    assert stored.scrubbed_at is not None
    assert stored.resolved_at is not None
    assert stored.last_error is None
    assert stored.claim_token == row.token.value  # the record of which claim resolved it
    assert await h.store.claim_due(claim(h.now + 10 * LEASE)) == []


@VIA
async def test_skipped_mark_scrubs_too_and_keeps_its_reason(harness, via):
    h = harness
    row_id = (await h.enqueue(message(to="a@example.org", invite_url="https://x/SECRET"))).row_id
    row = await claim_one(h, row_id)
    mark = Mark.skipped(row, "recipient opted out", scrub_keys=SECRETS)
    assert await apply(h, via, mark) is MarkResult.APPLIED
    stored = await h.store.get(row_id)
    assert stored is not None
    assert (stored.status, stored.last_error) == (Status.SKIPPED, "recipient opted out")
    assert stored.payload == {"to": "a@example.org"}
    assert stored.scrubbed_at is not None


@VIA
async def test_failed_mark_keeps_the_whole_payload(harness, via):
    h = harness
    payload = {"to": "a@example.org", "setup_url": "https://x/SECRET", "pdf": "JVBERi0x"}
    row_id = (await h.enqueue(NewMessage(LANE, payload))).row_id
    row = await claim_one(h, row_id)

    assert await apply(h, via, Mark.failed(row, "550 5.1.1 no such user")) is (MarkResult.APPLIED)

    stored = await h.store.get(row_id)
    assert stored is not None
    assert stored.status is Status.FAILED
    assert stored.payload == payload
    assert stored.last_error == "550 5.1.1 no such user"
    assert stored.scrubbed_at is None
    assert stored.resolved_at is not None
    assert await h.store.claim_due(claim(h.now + 10 * LEASE)) == []


@VIA
async def test_retry_mark_sets_the_next_due_time_in_the_store_s_clock_and_ends_the_claim(
    harness, via
):
    h = harness
    row_id = (await h.enqueue(message())).row_id
    row = await claim_one(h, row_id)
    delay = timedelta(minutes=5)

    before = await h.later()
    result = await apply(h, via, Mark.retry(row, "451 4.3.0 busy", delay=delay))
    after = await h.later()

    assert result is MarkResult.APPLIED
    stored = await h.store.get(row_id)
    assert stored is not None
    assert stored.status is Status.PENDING
    # The store's own clock at the mark + the delay (not the claim's injected time, an hour on).
    assert before + delay < stored.next_attempt_at < after + delay
    again_at = stored.next_attempt_at
    assert (stored.last_error, stored.claim_token, stored.resolved_at) == (
        "451 4.3.0 busy",
        None,
        None,
    )
    # The retry ended the claim: a second mark of the same claim is stale.
    assert await apply(h, via, Mark.failed(row, "late")) is MarkResult.STALE
    assert await h.store.claim_due(claim(again_at - TICK)) == []
    (again,) = await h.store.claim_due(claim(again_at))
    assert (again.id, again.attempts) == (row_id, 2)


@VIA
async def test_a_mark_with_a_wrong_token_is_stale_and_changes_nothing(harness, via):
    h = harness
    row_id = (await h.enqueue(message(to="a@example.org", setup_url="https://x/SECRET"))).row_id
    row = await claim_one(h, row_id)
    before = await h.store.get(row_id)
    forged = Mark.dispatched(
        ClaimedRow(
            id=row.id,
            lane=row.lane,
            payload=row.payload,
            attempts=row.attempts,
            token=new_token(),
            lease_expires_at=row.lease_expires_at,
            created_at=row.created_at,
        ),
        scrub_keys=SECRETS,
    )

    assert await apply(h, via, forged) is MarkResult.STALE

    assert await h.store.get(row_id) == before
    assert (h.store.stats.applied_marks, h.store.stats.stale_marks) == (0, 1)


@VIA
async def test_a_mark_on_a_resolved_row_is_stale(harness, via):
    h = harness
    row_id = (await h.enqueue(message())).row_id
    row = await claim_one(h, row_id)
    assert await apply(h, via, Mark.dispatched(row, scrub_keys=SECRETS)) is (MarkResult.APPLIED)
    resolved = await h.store.get(row_id)

    late = await apply(h, via, Mark.failed(row, "550 rejected"))
    # The same claim's success mark again (a retried mark whose first commit did land): on
    # PostgreSQL it takes the lean statement, whose own status guard must stop it too.
    again = await apply(h, via, Mark.dispatched(row, scrub_keys=SECRETS))

    assert (late, again) == (MarkResult.STALE, MarkResult.STALE)
    assert await h.store.get(row_id) == resolved


@VIA
async def test_a_late_mark_after_a_sibling_reclaimed_the_row_is_stale(harness, via):
    """The fence (C10): the status guard alone would let the late failure overwrite the row."""
    h = harness
    row_id = (await h.enqueue(message(to="a@example.org", setup_url="https://x/SECRET"))).row_id
    slow = await claim_one(h, row_id)
    sibling = await claim_one(h, row_id, at=h.now + LEASE)  # the slow worker's lease ran out

    late_failure = await apply(h, via, Mark.failed(slow, "550 late and wrong"))
    late_success = await apply(h, via, Mark.dispatched(slow, scrub_keys=SECRETS))

    assert (late_failure, late_success) == (MarkResult.STALE, MarkResult.STALE)
    stored = await h.store.get(row_id)
    assert stored is not None
    assert (stored.status, stored.attempts, stored.claim_token) == (
        Status.PENDING,
        2,
        sibling.token.value,
    )
    assert stored.last_error is None
    assert stored.payload == {"to": "a@example.org", "setup_url": "https://x/SECRET"}
    assert await apply(h, via, Mark.dispatched(sibling, scrub_keys=SECRETS)) is (MarkResult.APPLIED)


async def test_mark_many_applies_each_mark_fenced_on_its_own_and_answers_in_order(harness):
    h = harness
    secret = {"to": "a@example.org", "setup_url": "https://x/SECRET"}
    taken, sent, failed, retried, skipped = [
        (await h.enqueue(NewMessage(LANE, secret))).row_id for _ in range(5)
    ]
    rows = {row.id: row for row in await h.store.claim_due(claim(h.now))}
    delay = timedelta(minutes=5)
    # The first row's lease ran out and a sibling claimed it: its claim has moved on.
    (sibling,) = await h.store.claim_due(claim(h.now + LEASE, limit=1))
    assert sibling.id == taken

    before = await h.later()
    results = await h.store.mark_many(
        [
            Mark.failed(rows[failed], "550 no such user"),
            Mark.dispatched(rows[sent], scrub_keys=SECRETS),
            Mark.dispatched(rows[taken], scrub_keys=SECRETS),  # the old claim's: stale
            Mark.retry(rows[retried], "451 busy", delay=delay),
            Mark.skipped(rows[skipped], "opted out", scrub_keys=SECRETS),
        ]
    )

    after = await h.later()
    assert results == [MarkResult.APPLIED] * 2 + [MarkResult.STALE] + [MarkResult.APPLIED] * 2
    got = {i: await h.store.get(i) for i in (sent, failed, retried, skipped, taken)}
    assert {i: r.status for i, r in got.items()} == {
        sent: Status.DISPATCHED,
        failed: Status.FAILED,
        retried: Status.PENDING,
        skipped: Status.SKIPPED,
        taken: Status.PENDING,
    }
    assert got[sent].payload == got[skipped].payload == {"to": "a@example.org"}
    assert got[failed].payload == got[retried].payload == got[taken].payload == secret
    assert before + delay < got[retried].next_attempt_at < after + delay
    assert got[retried].claim_token is None
    assert got[taken].claim_token == sibling.token.value
    assert (got[failed].last_error, got[skipped].last_error) == ("550 no such user", "opted out")
    assert (h.store.stats.applied_marks, h.store.stats.stale_marks) == (4, 1)


async def test_a_group_of_sent_marks_fences_each_row_and_counts_its_stale_ones(harness):
    # Every mark of the group is sent or skipped, with the lane's scrub keys: on PostgreSQL the
    # lean grouped statement (MARK_SENT_MANY) takes it, and its stale marks are counted apart.
    h = harness
    secret = {"to": "a@example.org", "setup_url": "https://x/SECRET"}
    taken, sent, skipped = [(await h.enqueue(NewMessage(LANE, secret))).row_id for _ in range(3)]
    rows = {row.id: row for row in await h.store.claim_due(claim(h.now))}
    (sibling,) = await h.store.claim_due(claim(h.now + LEASE, limit=1))
    assert sibling.id == taken

    results = await h.store.mark_many(
        [
            Mark.dispatched(rows[sent], scrub_keys=SECRETS),
            Mark.dispatched(rows[taken], scrub_keys=SECRETS),  # the old claim's: stale
            Mark.skipped(rows[skipped], "opted out", scrub_keys=SECRETS),
        ]
    )

    assert results == [MarkResult.APPLIED, MarkResult.STALE, MarkResult.APPLIED]
    got = {i: await h.store.get(i) for i in (sent, taken, skipped)}
    assert (got[sent].status, got[skipped].status) == (Status.DISPATCHED, Status.SKIPPED)
    assert got[sent].payload == got[skipped].payload == {"to": "a@example.org"}
    assert got[skipped].last_error == "opted out"
    assert (got[taken].status, got[taken].payload) == (Status.PENDING, secret)
    assert got[taken].claim_token == sibling.token.value
    assert (h.store.stats.applied_marks, h.store.stats.stale_marks) == (2, 1)
    stats = await h.store.lane_stats()
    assert stats[LANE].stale_marks == 1


async def test_mark_many_of_nothing_is_nothing_and_two_marks_of_one_row_are_refused(harness):
    h = harness
    assert list(await h.store.mark_many([])) == []
    row_id = (await h.enqueue(message())).row_id
    row = await claim_one(h, row_id)
    with pytest.raises(ValueError, match="two marks for the same row"):
        await h.store.mark_many([Mark.failed(row, "a"), Mark.dispatched(row, scrub_keys=SECRETS)])
    stored = await h.store.get(row_id)
    assert stored is not None
    assert stored.status is Status.PENDING


async def test_concurrent_marks_of_one_claim_apply_once(harness):
    h = harness
    row_id = (await h.enqueue(message())).row_id
    row = await claim_one(h, row_id)
    results = await asyncio.gather(
        h.store.mark_if_pending(Mark.dispatched(row, scrub_keys=SECRETS)),
        h.store.mark_if_pending(Mark.failed(row, "550 rejected")),
    )
    assert sorted(r.value for r in results) == ["applied", "stale"]


# --- release --------------------------------------------------------------------------------------


async def test_release_makes_the_row_due_at_once_and_refunds_the_attempt(harness):
    h = harness
    row_id = (await h.enqueue(message())).row_id
    row = await claim_one(h, row_id)
    assert await h.store.claim_due(claim(h.now)) == []  # leased

    assert await h.store.release(row.id, row.token) is MarkResult.APPLIED

    stored = await h.store.get(row_id)
    assert stored is not None
    assert (stored.status, stored.attempts, stored.claim_token, stored.claimed_at) == (
        Status.PENDING,
        0,
        None,
        None,
    )
    (again,) = await h.store.claim_due(claim(h.now))
    assert (again.id, again.attempts) == (row_id, 1)
    assert again.token != row.token
    # The released claim is over: its marks are stale now.
    assert await h.store.mark_if_pending(Mark.failed(row, "late")) is MarkResult.STALE


async def test_release_is_fenced(harness):
    h = harness
    row_id = (await h.enqueue(message())).row_id
    first = await claim_one(h, row_id)

    assert await h.store.release(row_id, new_token()) is MarkResult.STALE
    assert await h.store.claim_due(claim(h.now)) == []  # still leased to the first claim

    sibling = await claim_one(h, row_id, at=h.now + LEASE)
    assert await h.store.release(first.id, first.token) is MarkResult.STALE
    stored = await h.store.get(row_id)
    assert stored is not None
    assert (stored.attempts, stored.claim_token) == (2, sibling.token.value)

    assert await h.store.mark_if_pending(Mark.failed(sibling, "550 rejected")) is (
        MarkResult.APPLIED
    )
    assert await h.store.release(sibling.id, sibling.token) is MarkResult.STALE
    stored = await h.store.get(row_id)
    assert stored is not None
    assert (stored.status, stored.attempts) == (Status.FAILED, 2)


# --- requeue --------------------------------------------------------------------------------------


async def test_requeue_puts_a_failed_row_back_with_attempts_reset_and_an_audit_record(harness):
    h = harness
    row_id = await failed_row(h, "550 5.1.1 no such user")

    result = await h.store.requeue_failed(RequeueRequest(actor=ACTOR, row_ids=(row_id,)))

    assert result.requeued == (row_id,)
    assert result.refused == {}
    stored = await h.store.get(row_id)
    assert stored is not None
    assert (stored.status, stored.attempts) == (Status.PENDING, 0)
    assert (stored.last_error, stored.claim_token, stored.resolved_at) == (None, None, None)
    assert stored.payload == {"to": "alice@example.org"}
    assert await h.audit() == [(row_id, ACTOR, 1, "550 5.1.1 no such user")]
    (again,) = await h.store.claim_due(claim(h.now))
    assert (again.id, again.attempts) == (row_id, 1)


async def test_a_requeue_keeps_its_reason_in_the_audit(harness):
    h = harness
    with_reason = await failed_row(h, "451 4.3.0 try later")
    without = await failed_row(h, "451 4.3.0 try later")
    await h.store.requeue_failed(
        RequeueRequest(actor=ACTOR, row_ids=(with_reason,), reason="OPS-42: relay fixed")
    )
    await h.store.requeue_failed(RequeueRequest(actor=ACTOR, row_ids=(without,)))
    assert await h.reasons() == ["OPS-42: relay fixed", None]
    with pytest.raises(ValueError, match="one line"):
        RequeueRequest(actor=ACTOR, row_ids=(without,), reason="two\nlines")
    with pytest.raises(ValueError, match="at most 500"):
        RequeueRequest(actor=ACTOR, row_ids=(without,), reason="x" * 501)


async def test_requeue_refuses_sent_pending_and_unknown_rows_and_says_why(harness):
    h = harness
    failed = await failed_row(h, "550 rejected")
    sent = await dispatched_row(h)
    pending = (await h.enqueue(NewMessage(LANE, {"n": 1}, not_before=h.now + LEASE))).row_id
    unknown = 987_654

    result = await h.store.requeue_failed(
        RequeueRequest(actor=ACTOR, row_ids=(failed, sent, pending, unknown, "not-an-id"))
    )

    assert result.requeued == (failed,)
    assert set(result.refused) == {sent, pending, unknown, "not-an-id"}
    assert "scrubbed" in result.refused[sent]
    assert "only failed rows" in result.refused[pending]
    assert result.refused[unknown] == "no such row"
    assert result.refused["not-an-id"] == "no such row"
    sent_row = await h.store.get(sent)
    assert sent_row is not None
    assert sent_row.status is Status.DISPATCHED
    assert [entry[0] for entry in await h.audit()] == [failed]


async def test_requeue_by_filter_takes_the_failed_rows_matching_every_filter(harness):
    h = harness
    early = await failed_row(h, "550 5.2.1 mailbox unavailable")
    boundary = await h.later()
    late = await failed_row(h, "550 5.2.1 mailbox unavailable")
    rejected = await failed_row(h, "554 5.7.1 message rejected")
    webhook = await failed_row(h, "410 gone", lane=OTHER_LANE)
    await h.enqueue(NewMessage(LANE, {"n": 1}, not_before=h.now + LEASE))  # pending: never taken

    def by(**filters: Any) -> RequeueRequest:
        return RequeueRequest(actor=ACTOR, **filters)

    store = h.store
    taken = await store.requeue_failed(
        by(lane=LANE, error_contains="mailbox", failed_since=boundary)
    )
    assert taken.requeued == (late,)
    assert (await store.requeue_failed(by(lane=OTHER_LANE))).requeued == (webhook,)
    assert (await store.requeue_failed(by(failed_before=boundary))).requeued == (early,)
    assert (await store.requeue_failed(by(error_contains="rejected"))).requeued == (rejected,)
    nothing_left = await store.requeue_failed(by())
    assert (nothing_left.requeued, nothing_left.refused) == ((), {})
    assert sorted(entry[0] for entry in await h.audit()) == sorted([early, late, rejected, webhook])


# --- operator reads and counters ------------------------------------------------------------------


async def test_get_of_an_unknown_row_is_none(harness):
    assert await harness.store.get(424_242) is None


async def test_counts_rows_per_lane_and_status(harness):
    h = harness
    await failed_row(h, "550 rejected")
    await dispatched_row(h)
    await dispatched_row(h, lane=OTHER_LANE)
    await enqueue_ids(h, 2, due=h.now + LEASE)
    assert await h.store.counts() == {
        LANE: {Status.PENDING: 2, Status.DISPATCHED: 1, Status.FAILED: 1},
        OTHER_LANE: {Status.DISPATCHED: 1},
    }


async def test_list_failed_shows_the_newest_first_and_groups_by_error(harness):
    h = harness
    first = await failed_row(h, "550 mailbox unavailable")
    await h.later()
    second = await failed_row(h, "554 rejected")
    await h.later()
    third = await failed_row(h, "550 mailbox unavailable")
    await failed_row(h, "410 gone", lane=OTHER_LANE)

    report = await h.store.list_failed(LANE, limit=2)

    assert [r.id for r in report.rows] == [third, second]
    assert [(g.error, g.rows) for g in report.by_error] == [
        ("550 mailbox unavailable", 2),
        ("554 rejected", 1),
    ]
    group = report.by_error[0]
    assert group.first_failed_at is not None
    assert group.last_failed_at is not None
    assert group.first_failed_at < group.last_failed_at
    everything = await h.store.list_failed()
    assert len(everything.rows) == 4
    assert first in [r.id for r in everything.rows]


async def test_stats_count_claimed_rows_applied_and_stale_marks(harness):
    h = harness
    await enqueue_ids(h, 3)
    a, b, c = await h.store.claim_due(claim(h.now))
    assert await h.store.mark_if_pending(Mark.dispatched(a, scrub_keys=SECRETS)) is (
        MarkResult.APPLIED
    )
    assert await h.store.mark_if_pending(Mark.failed(a, "late")) is MarkResult.STALE
    assert await h.store.release(b.id, b.token) is MarkResult.APPLIED
    assert await h.store.release(b.id, b.token) is MarkResult.STALE
    assert await h.store.mark_if_pending(Mark.failed(c, "550 rejected")) is MarkResult.APPLIED
    await h.store.claim_due(claim(h.now))  # b again

    stats = h.store.stats
    assert (stats.claimed_rows, stats.applied_marks, stats.stale_marks) == (4, 3, 2)
    # What outbox stats shows counts the stale MARK, durably and per lane (not the release).
    assert (await h.store.lane_stats())[LANE].stale_marks == 1


@VIA
async def test_stale_marks_are_counted_per_lane_for_outbox_stats(harness, via):
    h = harness
    row_id = (await h.enqueue(message())).row_id
    other_id = (await h.enqueue(message(OTHER_LANE))).row_id
    slow = await claim_one(h, row_id)
    other = await claim_one(h, other_id, lane=OTHER_LANE)
    await claim_one(h, row_id, at=h.now + LEASE)  # a sibling re-claimed the slow one's row
    assert await apply(h, via, Mark.dispatched(other, scrub_keys=SECRETS)) is MarkResult.APPLIED

    assert await apply(h, via, Mark.failed(slow, "late")) is MarkResult.STALE
    assert await apply(h, via, Mark.dispatched(slow, scrub_keys=SECRETS)) is MarkResult.STALE
    assert await apply(h, via, Mark.failed(other, "after it was sent")) is MarkResult.STALE

    stats = await h.store.lane_stats()
    assert {lane: s.stale_marks for lane, s in stats.items()} == {LANE: 2, OTHER_LANE: 1}
    assert stats[LANE].rows == {Status.PENDING: 1}
    assert stats[OTHER_LANE].rows == {Status.DISPATCHED: 1}


async def test_lane_stats_of_an_empty_store_is_empty(harness):
    assert await harness.store.lane_stats() == {}


# --- outages --------------------------------------------------------------------------------------


async def test_every_operation_of_an_unreachable_store_raises_store_unavailable(harness):
    store = await harness.store_unavailable()
    row = ClaimedRow(1, LANE, {}, 1, new_token(), harness.now, harness.now)
    operations = {
        "claim_due": lambda: store.claim_due(claim(harness.now)),
        "mark_if_pending": lambda: store.mark_if_pending(Mark.failed(row, "x")),
        "mark_many": lambda: store.mark_many([Mark.failed(row, "x")]),
        "release": lambda: store.release(row.id, row.token),
        "requeue_failed": lambda: store.requeue_failed(RequeueRequest(ACTOR, row_ids=(1,))),
        "get": lambda: store.get(1),
        "list_failed": store.list_failed,
        "lane_stats": store.lane_stats,
        "rewrite_payloads": lambda: store.rewrite_payloads(lambda _i, _l, p: p),
    }
    for name, operation in operations.items():
        with pytest.raises(StoreUnavailable, match=name) as raised:
            await operation()
        # Says which operation and why, never a row: no payload, token or parameters.
        assert row.token.value not in str(raised.value)


# --- key rotation's payload rewrite ---------------------------------------------------------------


async def test_rewrite_payloads_rewrites_unsent_rows_only_and_leaves_none_results_alone(harness):
    h = harness
    pending = (await h.enqueue(message(v=1))).row_id
    failed = await failed_row(h, "550 rejected")
    sent = await dispatched_row(h)
    kept = (await h.enqueue(message(v=2, keep=True))).row_id
    other = (await h.enqueue(message(OTHER_LANE, v=3))).row_id
    seen: list[tuple[int, str]] = []

    def rewrite(row_id: int, lane: str, payload: Any) -> dict[str, Any] | None:
        seen.append((row_id, lane))
        return None if payload.get("keep") else {**payload, "rotated": True}

    report = await h.store.rewrite_payloads(rewrite, lane=LANE, batch_size=2)

    assert seen == [(pending, LANE), (failed, LANE), (kept, LANE)]
    assert (report.examined, report.rewritten, report.changed) == (3, (pending, failed), ())
    assert report.batches == 2
    for row_id, rotated in ((pending, True), (failed, True), (kept, None), (sent, None)):
        stored = await h.store.get(row_id)
        assert stored is not None
        assert isinstance(stored.payload, dict)
        assert stored.payload.get("rotated") is rotated, row_id
    untouched = await h.store.get(other)
    assert untouched is not None
    assert untouched.payload == {"v": 3}


# --- the database clock (PostgreSQL only) ---------------------------------------------------------


@pytest.mark.integration
async def test_database_clock_reads_the_clock_the_store_stamps_with(contract_dsn):
    async with AsyncConnectionPool(contract_dsn, kwargs={"autocommit": True}, open=False) as pool:
        clock = DatabaseClock(pool)
        before = await clock.now()
        async with pool.connection() as conn, conn.transaction():
            created = await enqueue_async(conn, message())
        after = await clock.now()
        stored = await PostgresStore(pool).get(created.row_id)
    assert stored is not None
    assert before.utcoffset() is not None
    assert before <= stored.created_at <= after


# --- the trace context (ADR 0028) ---------------------------------------------------------------

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


async def test_a_message_s_trace_context_comes_back_with_its_claim(harness):
    traced = (await harness.enqueue(NewMessage(LANE, {"n": 1}, trace_context=TRACEPARENT))).row_id
    untraced = (await harness.enqueue(NewMessage(LANE, {"n": 2}))).row_id
    rows = {row.id: row for row in await harness.store.claim_due(claim(harness.now))}
    assert rows[traced].trace_context == TRACEPARENT
    assert rows[untraced].trace_context is None


async def test_an_enqueue_inside_a_recording_span_stores_that_span_s_context(harness):
    with recording() as otel:
        row_id = (await harness.enqueue(message())).row_id
    span = otel.span(f"send {LANE}")
    row = await claim_one(harness, row_id)
    assert row.trace_context is not None
    assert row.trace_context.split("-")[1:3] == [
        f"{context_of(span).trace_id:032x}",
        f"{context_of(span).span_id:016x}",
    ]
