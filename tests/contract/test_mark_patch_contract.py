"""The contract of a mark's payload patch (ADR 0015), for every store and both mark paths.

A mark may carry ``payload_patch``: payload keys written in the same fenced UPDATE, after the scrub
(``payload - scrub_keys || patch``). The e-mail lane records there who already has the message, so
a retry or a requeue never sends to them again. A stale mark writes nothing, patch included.
"""

from __future__ import annotations

from datetime import timedelta

import attrs
import pytest
from tests.support.contract import LANE, SECRETS, VIA, apply, claim_one

from outbox_core.delivery import Status
from outbox_core.messages import ClaimToken, Mark, NewMessage
from outbox_core.ports import MarkResult

DONE = {"outbox_delivered_to": ["ann@example.org"]}


@VIA
@pytest.mark.parametrize(
    ("make", "status"),
    [
        (
            lambda row: Mark.retry(row, "451 for bob", delay=timedelta(minutes=1)),
            "pending",
        ),
        (lambda row: Mark.failed(row, "550 for bob"), "failed"),
        (lambda row: Mark.dispatched(row, scrub_keys=SECRETS), "dispatched"),
    ],
    ids=["retry", "failed", "dispatched"],
)
async def test_a_mark_writes_its_patch_over_the_payload_after_the_scrub(harness, via, make, status):
    h = harness
    payload = {"to": ["ann@example.org", "bob@example.org"], "setup_url": "https://x/SECRET"}
    row_id = (await h.enqueue(NewMessage(LANE, payload))).row_id
    row = await claim_one(h, row_id)
    mark = attrs_evolve(make(row), DONE)

    assert await apply(h, via, mark) is MarkResult.APPLIED

    stored = await h.store.get(row_id)
    assert stored is not None
    assert stored.status is Status(status)
    expected = {**payload, **DONE}
    if status == "dispatched":
        del expected["setup_url"]  # the scrub still runs, and the patch after it
    assert stored.payload == expected


@VIA
async def test_a_stale_mark_writes_no_patch(harness, via):
    h = harness
    payload = {"to": "ann@example.org"}
    row_id = (await h.enqueue(NewMessage(LANE, payload))).row_id
    row = await claim_one(h, row_id)
    late = Mark(row.id, ClaimToken("another-claims-token"), Status.FAILED, "x", payload_patch=DONE)

    assert await apply(h, via, late) is MarkResult.STALE

    stored = await h.store.get(row_id)
    assert stored is not None
    assert stored.payload == payload


@VIA
async def test_a_patch_replaces_the_key_it_names_and_keeps_the_others(harness, via):
    h = harness
    payload = {"to": ["a@example.org", "b@example.org"], "outbox_delivered_to": ["a@example.org"]}
    row_id = (await h.enqueue(NewMessage(LANE, payload))).row_id
    row = await claim_one(h, row_id)
    both = {"outbox_delivered_to": ["a@example.org", "b@example.org"]}
    mark = Mark.retry(row, "451", delay=timedelta(seconds=1))

    assert await apply(h, via, attrs_evolve(mark, both)) is MarkResult.APPLIED

    stored = await h.store.get(row_id)
    assert stored is not None
    assert stored.payload == {**payload, **both}


def attrs_evolve(mark: Mark, patch: dict[str, list[str]]) -> Mark:
    return attrs.evolve(mark, payload_patch=patch)


@VIA
async def test_a_refund_mark_gives_the_attempt_back_and_keeps_the_last_real_error(harness, via):
    """A deferred send (``Outcome.deferred``: a cap of ours held it back) is a retry mark with
    ``refund``: pending again, due after its delay, the claim's attempt taken back, and the last
    error and ``updated_at`` (what endpoint health reads) as they were."""
    h = harness
    row_id = (await h.enqueue(NewMessage(LANE, {"to": "ann@example.org"}))).row_id
    first = await claim_one(h, row_id)
    assert await apply(h, via, Mark.retry(first, "503", delay=timedelta(0))) is MarkResult.APPLIED
    row = await claim_one(h, row_id)
    assert row.attempts == 2
    before = await h.store.get(row_id)
    assert before is not None
    deferral = Mark(
        row.id, row.token, Status.PENDING, "rate cap", retry_delay=timedelta(0), refund=True
    )

    assert await apply(h, via, deferral) is MarkResult.APPLIED

    stored = await h.store.get(row_id)
    assert stored is not None
    assert stored.status is Status.PENDING
    assert stored.attempts == 1
    assert stored.last_error == "503"
    assert stored.updated_at == before.updated_at
    again = await claim_one(h, row_id)
    assert again.attempts == 2
