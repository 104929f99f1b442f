"""The webhook repository's contract (ADR 0017), for the in-memory repository and PostgreSQL's:
one suite, so ``memory.MemoryWebhookRepository`` (what hosts' tests and the simulator run) keeps
the semantics of ``postgres.webhooks.WebhookRepository``.

- fan-out: the event, born-leased deliveries and the outbox row's mark at once; a stale claim
  token writes nothing; one event per outbox row; a row that is not an event is refused;
- ``fan_out_many``: each row fenced on its own, results in the order of the rows;
- born leased: the retry claim can't take a delivery inside its birth lease, and takes it after;
- delivery marks: fenced (a late first attempt, a late failure after a sibling's success), the
  410 mark disables the endpoint in its own step, the marks' payload patch feeds the report;
- replay (one endpoint, all, interrupted and re-run, refusals), ``replay_failed``;
- endpoints (add, list, disable, enable with what was missed), secret rotation, the health sweep
  with the owner's notice (one step: disabled and told, or neither).

PostgreSQL-only cases stay in tests/integration/test_webhook_fan_out.py (a crash between the
fan-out's statements, the legacy NULL due time, the host's enqueue).
"""

from __future__ import annotations

import re
from datetime import timedelta

import attrs
import pytest
from tests.support.contract import VIA
from tests.support.webhooks import BIRTH, new_secret, notice_for, token

from outbox_adapters.webhook_model import DELIVERY_LANE, WEBHOOK_LANE, Endpoint, WebhookRefused
from outbox_core.delivery import Status
from outbox_core.errors import ConfigurationError, InvalidMessage
from outbox_core.messages import ClaimedRow, Mark, NewMessage, RowId
from outbox_core.ports import MarkResult
from outbox_core.signing import WebhookSecret

TICK = timedelta(microseconds=1)
#: Payloads a row written around ``enqueue_webhook`` could hold: none of them is an event.
NOT_EVENTS = (
    {"event_type": "invoice.paid", "data": [1]},
    {"event_type": "no space", "data": {}},
    "text",
)


async def mark(wh, via: str, m: Mark) -> MarkResult:
    result: MarkResult
    if via == "mark_if_pending":
        result = await wh.deliveries.mark_if_pending(m)
    else:
        (result,) = await wh.deliveries.mark_many([m])
    return result


async def status_of(store, row_id: RowId) -> tuple[Status, str | None]:
    stored = await store.get(row_id)
    assert stored is not None
    return stored.status, stored.claim_token


# --- fan-out --------------------------------------------------------------------------------------


async def test_fan_out_makes_the_event_born_leased_deliveries_and_the_outbox_mark_at_once(wh):
    first = await wh.endpoint("invoice.paid")
    every = await wh.endpoint("*")
    await wh.endpoint("user.created")  # not subscribed
    disabled = await wh.endpoint("invoice.paid")
    await wh.repo.disable_endpoint(disabled, "off for the test")
    await wh.enqueue("invoice.paid", invoice=7)
    (row,) = await wh.claim_outbox()
    birth = token()
    before = await wh.now()
    fan = await wh.repo.fan_out(row, birth_lease=BIRTH, birth_token=birth)

    assert fan.marked
    assert fan.event_id is not None
    assert re.fullmatch(r"msg_[0-9a-f]{32}", fan.msg_id or "")
    assert sorted(d.payload["endpoint_id"] for d in fan.deliveries) == [first, every]
    for delivery in fan.deliveries:
        assert delivery.lane == DELIVERY_LANE
        assert delivery.attempts == 1
        assert delivery.token == birth
        assert delivery.payload["event_id"] == fan.event_id
        assert delivery.lease_expires_at >= before + BIRTH
        stored = await wh.deliveries.get(delivery.id)
        assert (stored.status, stored.attempts, stored.claim_token) == (
            Status.PENDING, 1, birth.value
        )  # fmt: skip
        assert stored.next_attempt_at == delivery.lease_expires_at
        assert stored.claimed_at is not None
    assert await wh.delivery_count() == 2
    assert (await status_of(wh.outbox, row.id))[0] is Status.DISPATCHED
    assert await wh.events() == [
        (fan.event_id, fan.msg_id, "invoice.paid", {"invoice": 7}, row.id, None, False)
    ]
    target = await wh.repo.delivery_target(fan.deliveries[0].id)
    assert target is not None
    assert (target.msg_id, target.event_id, target.enabled) == (fan.msg_id, fan.event_id, True)
    assert target.url.startswith("https://")
    assert target.secrets == (WebhookSecret.parse(wh.secrets[target.endpoint_id]),)
    assert target.body.startswith(b'{"data":{"invoice":7},"timestamp":"')
    assert target.body.endswith(b'Z","type":"invoice.paid"}')
    assert await wh.repo.delivery_target(10_000) is None


async def test_a_fan_out_under_a_stale_claim_token_writes_nothing(wh):
    await wh.endpoint("invoice.paid")
    await wh.enqueue()
    (row,) = await wh.claim_outbox()
    (sibling,) = await wh.claim_outbox(now=row.lease_expires_at + TICK)  # the lease ran out
    stale = await wh.repo.fan_out(row, birth_lease=BIRTH, birth_token=token())
    assert not stale.marked
    assert stale.event_id is None
    assert stale.deliveries == ()
    assert await wh.events() == []
    assert await wh.delivery_count() == 0
    assert await status_of(wh.outbox, row.id) == (Status.PENDING, sibling.token.value)
    assert (await wh.outbox.lane_stats())[WEBHOOK_LANE].stale_marks == 1
    fresh = await wh.repo.fan_out(sibling, birth_lease=BIRTH, birth_token=token())
    assert fresh.marked
    assert len(fresh.deliveries) == 1


async def test_handler_owns_the_mark_a_replayed_drainer_tick_claims_nothing_and_one_event_exists(
    wh,
):
    await wh.endpoint("invoice.paid")
    fan = await wh.drained()
    assert fan.marked
    assert await wh.claim_outbox(now=await wh.now() + timedelta(days=1)) == []
    assert len(await wh.events()) == 1
    assert await wh.delivery_count() == 1


async def test_a_row_that_is_not_an_event_is_refused_before_anything_is_written(wh):
    await wh.endpoint("invoice.paid")
    await wh.enqueue()
    (row,) = await wh.claim_outbox()
    for payload in NOT_EVENTS:
        with pytest.raises(InvalidMessage):
            await wh.repo.fan_out(
                attrs.evolve(row, payload=payload), birth_lease=BIRTH, birth_token=token()
            )
    assert (await status_of(wh.outbox, row.id))[0] is Status.PENDING
    assert await wh.events() == []


# --- targets --------------------------------------------------------------------------------------


async def test_delivery_targets_reads_several_deliveries_as_delivery_target_reads_each(wh):
    await wh.endpoint("invoice.paid")
    await wh.endpoint("*")
    for n in range(2):
        await wh.enqueue(n=n)
    rows = await wh.claim_outbox()
    fans = await wh.repo.fan_out_many(rows, birth_lease=BIRTH, birth_token=token())
    ids = [int(d.id) for fan in fans for d in fan.deliveries]
    assert len(ids) == 4
    targets = await wh.repo.delivery_targets([*ids, 987_654])  # one that does not exist
    assert sorted(targets) == sorted(ids)
    for delivery_id in ids:
        assert targets[delivery_id] == await wh.repo.delivery_target(delivery_id)
    assert await wh.repo.delivery_targets([]) == {}


# --- fan_out_many ---------------------------------------------------------------------------------


async def test_fan_out_many_refuses_a_batch_with_a_row_that_is_not_an_event_writing_nothing(wh):
    await wh.endpoint("invoice.paid")
    await wh.enqueue()
    await wh.enqueue()
    good, row = await wh.claim_outbox()
    for payload in NOT_EVENTS:
        bad = attrs.evolve(row, payload=payload)
        with pytest.raises(InvalidMessage):
            await wh.repo.fan_out_many([good, bad], birth_lease=BIRTH, birth_token=token())
    for claimed in (good, row):
        assert (await status_of(wh.outbox, claimed.id))[0] is Status.PENDING
    assert await wh.events() == []


async def test_fan_out_many_fences_each_row_on_its_own_and_answers_in_the_order_of_the_rows(wh):
    one = await wh.endpoint("invoice.paid")
    two = await wh.endpoint("*")
    for n in range(3):
        await wh.enqueue(n=n)
    first, second, third = await wh.claim_outbox()
    # Another claim takes the second row (given back, then claimed again): our token is stale.
    await wh.outbox.release(second.id, second.token)
    (retaken,) = await wh.claim_outbox()
    birth = token()
    before = await wh.now()
    fans = await wh.repo.fan_out_many([third, second, first], birth_lease=BIRTH, birth_token=birth)

    assert [f.marked for f in fans] == [True, False, True]
    assert fans[1] == type(fans[1])(marked=False)
    made = {f.event_id for f in fans if f.marked}
    assert len(made) == 2  # one event per marked row, each its own
    assert len({f.msg_id for f in fans if f.marked}) == 2
    events = await wh.events()
    assert sorted((e[4], e[3]) for e in events) == [(first.id, {"n": 0}), (third.id, {"n": 2})]
    by_row = {e[4]: e[0] for e in events}
    assert (fans[0].event_id, fans[2].event_id) == (by_row[third.id], by_row[first.id])
    for fan in (fans[0], fans[2]):
        assert sorted(d.payload["endpoint_id"] for d in fan.deliveries) == [one, two]
        for delivery in fan.deliveries:
            assert delivery.payload["event_id"] == fan.event_id
            assert (delivery.attempts, delivery.token) == (1, birth)
            assert delivery.lease_expires_at >= before + BIRTH
    assert await wh.delivery_count() == 4
    assert await wh.claim_deliveries() == []  # born leased
    assert (await status_of(wh.outbox, second.id)) == (Status.PENDING, retaken.token.value)
    assert (await wh.outbox.lane_stats())[WEBHOOK_LANE].stale_marks == 1
    for row in (first, third):
        assert (await status_of(wh.outbox, row.id))[0] is Status.DISPATCHED
    # The row's new holder fans it out once; a second try of a done row is refused.
    (late,) = await wh.repo.fan_out_many([retaken], birth_lease=BIRTH, birth_token=token())
    assert late.marked
    again = await wh.repo.fan_out_many([first, retaken], birth_lease=BIRTH, birth_token=token())
    assert [f.marked for f in again] == [False, False]
    assert len(await wh.events()) == 3
    assert await wh.repo.fan_out_many([], birth_lease=BIRTH, birth_token=token()) == ()


# --- born leased ----------------------------------------------------------------------------------


async def test_the_retry_claim_cannot_take_a_delivery_inside_its_birth_lease_and_takes_it_after(wh):
    await wh.endpoint("invoice.paid")
    await wh.endpoint("invoice.paid")
    fan = await wh.drained()
    assert len(fan.deliveries) == 2
    assert await wh.claim_deliveries() == []  # the backend's now: inside the birth lease
    inside = min(d.lease_expires_at for d in fan.deliveries) - timedelta(seconds=1)
    assert await wh.claim_deliveries(now=inside) == []
    after = max(d.lease_expires_at for d in fan.deliveries) + TICK
    taken = await wh.claim_deliveries(now=after)
    assert sorted(d.id for d in taken) == sorted(d.id for d in fan.deliveries)
    assert all(d.attempts == 2 for d in taken)


# --- delivery marks -------------------------------------------------------------------------------


async def after_birth(wh) -> tuple[ClaimedRow, ClaimedRow]:
    """A fanned-out delivery whose birth lease ran out, reclaimed by the retry worker."""
    await wh.endpoint("invoice.paid")
    fan = await wh.drained()
    (born,) = fan.deliveries
    (retry,) = await wh.claim_deliveries(now=born.lease_expires_at + TICK)
    return born, retry


@VIA
async def test_a_stale_failure_mark_after_a_sibling_s_success_is_dropped(wh, via):
    born, retry = await after_birth(wh)
    assert await mark(wh, via, Mark.dispatched(retry, scrub_keys=frozenset())) is MarkResult.APPLIED
    late = Mark.failed(born, "HTTP 500 after 8 s")
    assert await mark(wh, via, late) is MarkResult.STALE
    stored = await wh.deliveries.get(born.id)
    assert (stored.status, stored.last_error) == (Status.DISPATCHED, None)
    assert (await wh.deliveries.lane_stats())[DELIVERY_LANE].stale_marks == 1


@VIA
async def test_the_first_attempt_s_late_mark_after_the_retry_worker_reclaimed_the_delivery_is_stale(
    wh, via
):
    born, retry = await after_birth(wh)
    late = Mark.retry(born, "HTTP 503", delay=timedelta(seconds=5))
    assert await mark(wh, via, late) is MarkResult.STALE
    stored = await wh.deliveries.get(born.id)
    assert (stored.status, stored.claim_token, stored.last_error) == (
        Status.PENDING, retry.token.value, None
    )  # fmt: skip


def gone(row, *, reason: str = "HTTP 410 Gone: the receiver removed this endpoint") -> Mark:
    return attrs.evolve(Mark.failed(row, reason), disable_endpoint=True)


@VIA
async def test_a_410_mark_disables_the_endpoint_in_the_mark_s_own_step(wh, via, monkeypatch):
    born, retry = await after_birth(wh)
    (endpoint,) = await wh.repo.list_endpoints()
    # One step: if disabling the endpoint fails, the mark is not written either.
    with monkeypatch.context() as patch:
        wh.failing_disable(patch)
        with pytest.raises(Exception, match="simulated_failure"):
            await mark(wh, via, gone(retry))
    assert (await status_of(wh.deliveries, retry.id))[0] is Status.PENDING
    assert (await wh.repo.endpoint(endpoint.id)).enabled

    assert await mark(wh, via, gone(born)) is MarkResult.STALE  # stale: the endpoint stays
    assert (await wh.repo.endpoint(endpoint.id)).enabled

    assert await mark(wh, via, gone(retry)) is MarkResult.APPLIED
    stored = await wh.deliveries.get(retry.id)
    assert (stored.status, stored.last_error) == (
        Status.FAILED, "HTTP 410 Gone: the receiver removed this endpoint"
    )  # fmt: skip
    after = await wh.repo.endpoint(endpoint.id)
    assert (after.enabled, after.disabled_reason) == (
        False, "HTTP 410 Gone: the receiver removed this endpoint"
    )  # fmt: skip
    assert after.disabled_at is not None
    target = await wh.repo.delivery_target(retry.id)
    assert target is not None
    assert not target.enabled


@VIA
async def test_a_410_disable_tells_the_endpoint_s_owner_once_in_the_mark_s_step(
    wh, via, monkeypatch
):
    sick = await wh.endpoint("invoice.paid", owner_email="owner@example.org")
    await wh.endpoint("invoice.paid")  # no owner: nobody to tell
    fans = [await wh.drained(invoice=n) for n in range(3)]
    to_sick = [d for fan in fans for d in fan.deliveries if d.payload["endpoint_id"] == sick]
    others = [d for fan in fans for d in fan.deliveries if d.payload["endpoint_id"] != sick]
    assert (len(to_sick), len(others)) == (3, 3)
    # One step: a notice that cannot be enqueued leaves the mark and the endpoint as they were.
    with monkeypatch.context() as patch:
        wh.failing_notice(patch)
        with pytest.raises(Exception, match="simulated_failure"):
            await mark(wh, via, gone(to_sick[0]))
    assert (await status_of(wh.deliveries, to_sick[0].id))[0] is Status.PENDING
    assert (await wh.repo.endpoint(sick)).enabled
    assert await wh.mails() == []

    assert await mark(wh, via, gone(to_sick[0])) is MarkResult.APPLIED
    ((payload, key),) = await wh.mails()
    assert payload["to"] == ["owner@example.org"]
    assert payload["text"] == "HTTP 410 Gone: the receiver removed this endpoint"
    assert key.startswith(f"webhook-endpoint-{sick}-disabled-")
    # Later 410s of the same endpoint fail their deliveries; the owner was told once.
    assert await mark(wh, via, gone(to_sick[1])) is MarkResult.APPLIED
    assert await mark(wh, via, gone(to_sick[2])) is MarkResult.APPLIED
    assert len(await wh.mails()) == 1
    # An endpoint without an owner is disabled and nobody is told.
    assert await mark(wh, via, gone(others[0])) is MarkResult.APPLIED
    assert not (await wh.repo.endpoint(others[0].payload["endpoint_id"])).enabled
    assert len(await wh.mails()) == 1


async def test_the_marks_patch_the_status_code_and_snippet_into_the_payload_and_the_report_groups_them(
    wh,
):
    born, retry = await after_birth(wh)
    progress = {"last_status": 500, "response": "upstream exploded"}
    await wh.deliveries.mark_if_pending(
        attrs.evolve(Mark.failed(retry, "HTTP 500"), payload_patch=progress)
    )
    report = await wh.repo.deliveries()
    (group,) = report.groups
    assert (group.status, group.error, group.deliveries) == (Status.FAILED, "HTTP 500", 1)
    assert (group.last_status, group.response) == (500, "upstream exploded")
    assert report.by_status == {Status.FAILED: 1}
    assert (await wh.repo.deliveries(status="pending")).groups == ()
    assert (await wh.repo.deliveries(endpoint_id=group.endpoint_ids[0])).by_status == {
        Status.FAILED: 1
    }
    assert isinstance(born.payload, dict)
    assert born.payload == {
        "event_id": born.payload["event_id"],
        "endpoint_id": group.endpoint_ids[0],
    }


# --- replay ---------------------------------------------------------------------------------------


async def fail_all(wh, deliveries, reason: str = "HTTP 500") -> None:
    """The born deliveries' first attempts fail permanently (their marks, under the birth token)."""
    for delivery in deliveries:
        await wh.deliveries.mark_if_pending(Mark.failed(delivery, reason))


async def test_replay_to_one_endpoint_and_to_all_clones_the_event_with_born_leased_deliveries(wh):
    one = await wh.endpoint("invoice.paid")
    two = await wh.endpoint("*")
    fan = await wh.drained(invoice=9)
    birth = token()
    single = await wh.repo.replay(
        fan.event_id, endpoint_id=one, birth_lease=BIRTH, birth_token=birth
    )
    assert single.replay_of == fan.event_id
    assert single.event_id != fan.event_id
    assert single.msg_id != fan.msg_id
    assert not single.resumed
    assert [d.payload["endpoint_id"] for d in single.deliveries] == [one]
    assert single.delivery_ids == tuple(d.id for d in single.deliveries)
    assert all(d.attempts == 1 and d.token == birth for d in single.deliveries)
    every = await wh.repo.replay(fan.event_id, birth_lease=BIRTH, birth_token=token())
    assert sorted(d.payload["endpoint_id"] for d in every.deliveries) == [one, two]
    clones = [(e[5], e[3], e[6]) for e in await wh.events() if e[5] is not None]
    assert clones == [(fan.event_id, {"invoice": 9}, True)] * 2
    assert await wh.claim_deliveries() == []  # born leased
    # From the CLI (no first attempt in this process): due rows for the retry lane, no attempt.
    cli = await wh.repo.replay(
        fan.event_id, endpoint_id=two, birth_lease=timedelta(0), birth_token=None
    )
    assert cli.deliveries == ()
    (due,) = await wh.claim_deliveries(now=await wh.now() + TICK)
    assert (due.id, due.attempts) == (cli.delivery_ids[0], 1)


async def test_an_interrupted_replay_is_visible_and_re_running_it_completes_it_without_duplicates(
    wh, monkeypatch
):
    endpoint = await wh.endpoint("invoice.paid")
    fan = await wh.drained()
    with monkeypatch.context() as patch:
        wh.interrupted_replay(patch)
        with pytest.raises(Exception, match="simulated_failure"):
            await wh.repo.replay(fan.event_id, birth_lease=BIRTH, birth_token=token())
    open_clones = [e[0] for e in await wh.events() if e[5] == fan.event_id and not e[6]]
    assert len(open_clones) == 1  # visible: committed before any delivery
    resumed = await wh.repo.replay(fan.event_id, birth_lease=BIRTH, birth_token=token())
    assert resumed.resumed
    assert resumed.event_id == open_clones[0]
    assert [d.payload["endpoint_id"] for d in resumed.deliveries] == [endpoint]
    again = await wh.repo.replay(fan.event_id, birth_lease=BIRTH, birth_token=token())
    assert not again.resumed  # the first one completed: this is a new replay, by request
    assert await wh.delivery_count(resumed.event_id) == 1


async def test_replay_is_refused_with_the_reason_for_a_disabled_unknown_or_unsubscribed_endpoint(
    wh,
):
    endpoint = await wh.endpoint("invoice.paid")
    other = await wh.endpoint("user.created")
    fan = await wh.drained()
    await wh.repo.disable_endpoint(endpoint, "maintenance")
    with pytest.raises(WebhookRefused, match=r"endpoint \d+ is disabled \(maintenance\)"):
        await wh.repo.replay(
            fan.event_id, endpoint_id=endpoint, birth_lease=BIRTH, birth_token=token()
        )
    with pytest.raises(WebhookRefused, match="does not subscribe"):
        await wh.repo.replay(
            fan.event_id, endpoint_id=other, birth_lease=BIRTH, birth_token=token()
        )
    with pytest.raises(WebhookRefused, match="no webhook endpoint 999"):
        await wh.repo.replay(fan.event_id, endpoint_id=999, birth_lease=BIRTH, birth_token=token())
    with pytest.raises(WebhookRefused, match="no webhook event 999"):
        await wh.repo.replay(999, birth_lease=BIRTH, birth_token=token())
    with pytest.raises(WebhookRefused, match="no enabled endpoint subscribes"):
        await wh.repo.replay(fan.event_id, birth_lease=BIRTH, birth_token=token())
    assert len(await wh.events()) == 1


async def test_replay_failed_replays_the_failures_of_a_time_range_once(wh):
    one = await wh.endpoint("invoice.paid")
    two = await wh.endpoint("invoice.paid")
    early = await wh.drained(n=1)
    await fail_all(wh, early.deliveries)
    middle = await wh.later()
    late = await wh.drained(n=2)
    await fail_all(wh, [d for d in late.deliveries if d.payload["endpoint_id"] == one])
    ok = [d for d in late.deliveries if d.payload["endpoint_id"] == two]
    await wh.deliveries.mark_if_pending(Mark.dispatched(ok[0], scrub_keys=frozenset()))

    replays = await wh.repo.replay_failed(since=middle, birth_lease=BIRTH, birth_token=token())
    assert [(r.replay_of, r.endpoint_id) for r in replays] == [(late.event_id, one)]
    only_two = await wh.repo.replay_failed(
        since=middle - timedelta(hours=1), before=middle, endpoint_id=two,
        birth_lease=BIRTH, birth_token=token(),
    )  # fmt: skip
    assert [(r.replay_of, r.endpoint_id) for r in only_two] == [(early.event_id, two)]
    everything = await wh.repo.replay_failed(
        since=middle - timedelta(hours=1), birth_lease=BIRTH, birth_token=token()
    )
    assert [(r.replay_of, r.endpoint_id) for r in everything] == [(early.event_id, one)]
    assert (
        await wh.repo.replay_failed(
            since=middle - timedelta(hours=1), birth_lease=BIRTH, birth_token=token()
        )
        == []
    )
    await wh.repo.disable_endpoint(one, "down")
    with pytest.raises(WebhookRefused, match="is disabled; enable it first"):
        await wh.repo.replay_failed(
            since=middle, endpoint_id=one, birth_lease=BIRTH, birth_token=token()
        )
    with pytest.raises(WebhookRefused, match="no webhook endpoint 999"):
        await wh.repo.replay_failed(
            since=middle, endpoint_id=999, birth_lease=BIRTH, birth_token=token()
        )


# --- endpoints ------------------------------------------------------------------------------------


async def test_endpoints_are_added_listed_disabled_and_enabled_with_what_they_missed(wh):
    endpoint = await wh.endpoint("invoice.paid", "invoice.paid", owner_email="ops@example.org")
    (listed,) = await wh.repo.list_endpoints()
    assert (listed.id, listed.event_types, listed.enabled) == (endpoint, ("invoice.paid",), True)
    assert listed.owner_email == "ops@example.org"
    assert await wh.repo.endpoint(endpoint) == listed
    assert await wh.repo.endpoint(999) is None
    disabled = await wh.repo.disable_endpoint(endpoint, "receiver down")
    assert (disabled.enabled, disabled.disabled_reason) == (False, "receiver down")
    assert (await wh.repo.disable_endpoint(endpoint, "again")).disabled_reason == "receiver down"
    with pytest.raises(InvalidMessage, match="needs a reason"):
        await wh.repo.disable_endpoint(endpoint, " ")
    missed_event = await wh.drained()
    assert missed_event.deliveries == ()  # a disabled endpoint gets no delivery
    await wh.drained("user.created")  # not its type
    missed = await wh.repo.enable_endpoint(endpoint)
    assert missed.endpoint.enabled
    assert missed.endpoint.disabled_reason is None
    assert missed.disabled_since == disabled.disabled_at
    assert missed.event_ids == (missed_event.event_id,)
    assert (await wh.repo.enable_endpoint(endpoint)).event_ids == ()
    with pytest.raises(WebhookRefused, match="no webhook endpoint 999"):
        await wh.repo.enable_endpoint(999)
    with pytest.raises(WebhookRefused, match="no webhook endpoint 999"):
        await wh.repo.disable_endpoint(999, "why")


async def test_enable_lists_an_event_whose_delivery_was_skipped_while_the_endpoint_was_disabled(
    wh,
):
    endpoint = await wh.endpoint("invoice.paid")
    fan = await wh.drained()
    (delivery,) = fan.deliveries
    await wh.later()
    await wh.repo.disable_endpoint(endpoint, "paused")
    await wh.later()
    await wh.deliveries.mark_if_pending(
        Mark.skipped(delivery, "endpoint disabled", scrub_keys=frozenset())
    )
    missed = await wh.repo.enable_endpoint(endpoint)
    assert missed.event_ids == (fan.event_id,)


@pytest.mark.parametrize(
    ("url", "types", "secret", "owner", "error"),
    [
        ("https://a b", ["t"], None, None, InvalidMessage),
        ("", ["t"], None, None, InvalidMessage),
        ("https://x.example", [], None, None, InvalidMessage),
        ("https://x.example", ["bad type"], None, None, InvalidMessage),
        ("https://x.example", ["t"], "whsec_short", None, ConfigurationError),
        ("https://x.example", ["t"], None, "not-an-address", InvalidMessage),
    ],
)
async def test_add_endpoint_refuses_bad_input_and_writes_nothing(  # noqa: PLR0917
    wh, url, types, secret, owner, error
):
    with pytest.raises(error):
        await wh.repo.add_endpoint(
            url, types, secret=secret or new_secret(), owner_email=owner, tenant="acme"
        )
    assert await wh.repo.list_endpoints() == []


async def test_a_rotated_secret_signs_beside_the_new_one_during_the_overlap_and_not_after(wh):
    endpoint = await wh.endpoint("invoice.paid")
    fan = await wh.drained()
    (delivery,) = fan.deliveries
    old_text = wh.secrets[endpoint]
    new_text = new_secret()
    now = await wh.now()
    await wh.repo.rotate_secret(endpoint, new_secret=new_text, overlap=timedelta(hours=24), now=now)
    during = await wh.repo.delivery_target(delivery.id, now=now + timedelta(hours=23))
    after = await wh.repo.delivery_target(delivery.id, now=now + timedelta(hours=24, seconds=1))
    assert during is not None
    assert after is not None
    assert during.secrets == (WebhookSecret.parse(new_text), WebhookSecret.parse(old_text))
    assert after.secrets == (WebhookSecret.parse(new_text),)
    with pytest.raises(ConfigurationError):
        await wh.repo.rotate_secret(endpoint, new_secret=new_text, overlap=timedelta(seconds=-1))
    with pytest.raises(WebhookRefused, match="no webhook endpoint 999"):
        await wh.repo.rotate_secret(999, new_secret=new_text)
    assert new_text not in repr(during)


# --- endpoint health (B6) -------------------------------------------------------------------------


async def test_an_endpoint_failing_without_a_success_for_the_window_is_disabled_and_its_owner_told_once(
    wh,
):
    sick = await wh.endpoint("invoice.paid", owner_email="owner@example.org")
    healthy = await wh.endpoint("invoice.paid", owner_email="other@example.org")

    async def drain_once() -> None:
        fan = await wh.drained()
        for delivery in fan.deliveries:
            if delivery.payload["endpoint_id"] == sick:
                await wh.deliveries.mark_if_pending(Mark.failed(delivery, "HTTP 500"))
            else:
                await wh.deliveries.mark_if_pending(
                    Mark.dispatched(delivery, scrub_keys=frozenset())
                )

    await drain_once()
    window = timedelta(days=5)
    # Not yet: the failures began less than the window ago.
    assert (
        await wh.repo.disable_unhealthy(window=window, notice=notice_for, now=await wh.now()) == []
    )
    # Five days on, a fresh failure: failing without a success for the whole window.
    await wh.age_deliveries(6)
    await drain_once()
    disabled = await wh.repo.disable_unhealthy(window=window, notice=notice_for)
    assert [e.id for e in disabled] == [sick]
    assert disabled[0].disabled_reason == "failing without a successful delivery for 5 days"
    assert await wh.repo.disable_unhealthy(window=window, notice=notice_for) == []
    ((payload, key),) = await wh.mails()
    assert payload["to"] == ["owner@example.org"]
    assert key.startswith(f"webhook-endpoint-{sick}-disabled-")
    assert [(e.id, e.enabled) for e in await wh.repo.list_endpoints()] == [
        (sick, False), (healthy, True)
    ]  # fmt: skip
    with pytest.raises(ConfigurationError, match="health window"):
        await wh.repo.disable_unhealthy(window=timedelta(0), notice=notice_for)


async def test_endpoint_health_disables_and_tells_in_one_step(wh):
    sick = await wh.endpoint("invoice.paid", owner_email="owner@example.org")
    fan = await wh.drained()
    await fail_all(wh, fan.deliveries)
    await wh.age_deliveries(6)

    def broken(_endpoint: Endpoint) -> NewMessage:
        msg = "the notice could not be built"
        raise RuntimeError(msg)

    with pytest.raises(RuntimeError):
        await wh.repo.disable_unhealthy(notice=broken)
    assert [(e.id, e.enabled) for e in await wh.repo.list_endpoints()] == [(sick, True)]
    assert await wh.mails() == []
    (disabled,) = await wh.repo.disable_unhealthy(notice=notice_for)
    assert disabled.id == sick
    assert len(await wh.mails()) == 1
