"""The webhook model's operator side on real PostgreSQL: replay (one endpoint, all, a failed range,
an interrupted replay re-run), endpoints (disable, enable with what was missed), secret rotation,
and endpoint health (disabled and its owner told once, in one transaction).
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from tests.support.webhooks import BIRTH, Webhooks, new_secret, token

from outbox_adapters.postgres.webhooks import Endpoint, WebhookRefused
from outbox_adapters.postgres.webhooks import statements as webhook_statements
from outbox_core.errors import ConfigurationError, InvalidMessage
from outbox_core.messages import Mark, NewMessage
from outbox_core.signing import WebhookSecret

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("empty_outbox")]

TICK = timedelta(microseconds=1)


async def fail_all(wh: Webhooks, deliveries, reason: str = "HTTP 500") -> None:
    """The born deliveries' first attempts fail permanently (their marks, under the birth token)."""
    for delivery in deliveries:
        await wh.deliveries.mark_if_pending(Mark.failed(delivery, reason))


# --- replay ---------------------------------------------------------------------------------------


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
    assert all(d.attempts == 1 and d.token == birth for d in single.deliveries)
    every = await wh.repo.replay(fan.event_id, birth_lease=BIRTH, birth_token=token())
    assert sorted(d.payload["endpoint_id"] for d in every.deliveries) == [one, two]
    rows = await wh.rows(
        "SELECT replay_of, data, replay_completed_at IS NOT NULL FROM outbox_webhook_event"
        " WHERE replay_of IS NOT NULL ORDER BY id"
    )
    assert rows == [(fan.event_id, {"invoice": 9}, True)] * 2
    assert await wh.claim_deliveries() == []  # born leased


async def test_an_interrupted_replay_is_visible_and_re_running_it_completes_it_without_duplicates(
    wh, monkeypatch
):
    endpoint = await wh.endpoint("invoice.paid")
    fan = await wh.drained()
    with monkeypatch.context() as patch:
        patch.setattr(webhook_statements, "BORN_DELIVERIES", "SELECT 1 / 0")
        with pytest.raises(Exception, match="division by zero"):
            await wh.repo.replay(fan.event_id, birth_lease=BIRTH, birth_token=token())
    open_clones = await wh.rows(
        "SELECT id FROM outbox_webhook_event WHERE replay_of = %s AND replay_completed_at IS NULL",
        fan.event_id,
    )
    assert len(open_clones) == 1  # visible: committed before any delivery
    resumed = await wh.repo.replay(fan.event_id, birth_lease=BIRTH, birth_token=token())
    assert resumed.resumed
    assert resumed.event_id == open_clones[0][0]
    assert [d.payload["endpoint_id"] for d in resumed.deliveries] == [endpoint]
    again = await wh.repo.replay(fan.event_id, birth_lease=BIRTH, birth_token=token())
    assert not again.resumed  # the first one completed: this is a new replay, by request
    assert await wh.rows(
        "SELECT count(*) FROM outbox_webhook_delivery WHERE event_id = %s", resumed.event_id
    ) == [(1,)]


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
    assert await wh.rows("SELECT count(*) FROM outbox_webhook_event") == [(1,)]


async def test_replay_failed_replays_the_failures_of_a_time_range_once(wh):
    one = await wh.endpoint("invoice.paid")
    two = await wh.endpoint("invoice.paid")
    early = await wh.drained(n=1)
    await fail_all(wh, early.deliveries)
    ((middle,),) = await wh.rows("SELECT clock_timestamp()")
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


# --- endpoints ------------------------------------------------------------------------------------


async def test_endpoints_are_added_listed_disabled_and_enabled_with_what_they_missed(wh):
    endpoint = await wh.endpoint("invoice.paid", "invoice.paid", owner_email="ops@example.org")
    (listed,) = await wh.repo.list_endpoints()
    assert (listed.id, listed.event_types, listed.enabled) == (endpoint, ("invoice.paid",), True)
    assert listed.owner_email == "ops@example.org"
    disabled = await wh.repo.disable_endpoint(endpoint, "receiver down")
    assert (disabled.enabled, disabled.disabled_reason) == (False, "receiver down")
    assert (await wh.repo.disable_endpoint(endpoint, "again")).disabled_reason == "receiver down"
    missed_event = await wh.drained()
    assert missed_event.deliveries == ()  # a disabled endpoint gets no delivery
    await wh.drained("user.created")  # not its type
    missed = await wh.repo.enable_endpoint(endpoint)
    assert missed.endpoint.enabled
    assert missed.disabled_since == disabled.disabled_at
    assert missed.event_ids == (missed_event.event_id,)
    assert (await wh.repo.enable_endpoint(endpoint)).event_ids == ()
    with pytest.raises(WebhookRefused, match="no webhook endpoint 999"):
        await wh.repo.enable_endpoint(999)


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
        await wh.repo.add_endpoint(url, types, secret=secret or new_secret(), owner_email=owner)
    assert await wh.rows("SELECT count(*) FROM outbox_webhook_endpoint") == [(0,)]


async def test_a_rotated_secret_signs_beside_the_new_one_during_the_overlap_and_not_after(wh):
    endpoint = await wh.endpoint("invoice.paid")
    fan = await wh.drained()
    (delivery,) = fan.deliveries
    (old_text,) = (await wh.rows("SELECT secret FROM outbox_webhook_secret"))[0]
    new_text = new_secret()
    ((now,),) = await wh.rows("SELECT now()")
    await wh.repo.rotate_secret(endpoint, new_secret=new_text, overlap=timedelta(hours=24), now=now)
    during = await wh.repo.delivery_target(delivery.id, now=now + timedelta(hours=23))
    after = await wh.repo.delivery_target(delivery.id, now=now + timedelta(hours=24, seconds=1))
    assert during is not None
    assert after is not None
    assert during.secrets == (WebhookSecret.parse(new_text), WebhookSecret.parse(old_text))
    assert after.secrets == (WebhookSecret.parse(new_text),)
    with pytest.raises(ConfigurationError):
        await wh.repo.rotate_secret(endpoint, new_secret=new_text, overlap=timedelta(seconds=-1))


# --- endpoint health (B6) -------------------------------------------------------------------------


def notice_for(endpoint: Endpoint) -> NewMessage | None:
    if endpoint.owner_email is None:
        return None
    return NewMessage(
        "email",
        {"to": [endpoint.owner_email], "subject": f"endpoint {endpoint.id} disabled",
         "text": endpoint.disabled_reason or ""},
    )  # fmt: skip


async def test_an_endpoint_failing_without_a_success_for_the_window_is_disabled_and_its_owner_told_once(
    wh,
):
    sick = await wh.endpoint("invoice.paid", owner_email="owner@example.org")
    healthy = await wh.endpoint("invoice.paid", owner_email="other@example.org")
    fan = await wh.drained()
    for delivery in fan.deliveries:
        if delivery.payload["endpoint_id"] == sick:
            await wh.deliveries.mark_if_pending(Mark.failed(delivery, "HTTP 500"))
        else:
            await wh.deliveries.mark_if_pending(Mark.dispatched(delivery, scrub_keys=frozenset()))
    ((now,),) = await wh.rows("SELECT now()")
    window = timedelta(days=5)
    # Not yet: the failures began less than the window ago.
    assert await wh.repo.disable_unhealthy(window=window, notice=notice_for, now=now) == []
    # Five days on, a fresh failure: failing without a success for the whole window.
    await wh.rows(
        "UPDATE outbox_webhook_delivery SET created_at = created_at - interval '6 days',"
        " resolved_at = resolved_at - interval '6 days' RETURNING id"
    )
    later = await wh.drained()
    for delivery in later.deliveries:
        if delivery.payload["endpoint_id"] == sick:
            await wh.deliveries.mark_if_pending(Mark.failed(delivery, "HTTP 500"))
        else:
            await wh.deliveries.mark_if_pending(Mark.dispatched(delivery, scrub_keys=frozenset()))
    disabled = await wh.repo.disable_unhealthy(window=window, notice=notice_for)
    assert [e.id for e in disabled] == [sick]
    assert disabled[0].disabled_reason == "failing without a successful delivery for 5 days"
    assert await wh.repo.disable_unhealthy(window=window, notice=notice_for) == []
    mails = await wh.rows("SELECT lane, payload, idempotency_key FROM outbox_message")
    assert len(mails) == 1
    assert mails[0][1]["to"] == ["owner@example.org"]
    assert mails[0][2].startswith(f"webhook-endpoint-{sick}-disabled-")
    assert [(e.id, e.enabled) for e in await wh.repo.list_endpoints()] == [
        (sick, False), (healthy, True)
    ]  # fmt: skip


async def test_endpoint_health_disables_and_tells_in_one_transaction(wh):
    sick = await wh.endpoint("invoice.paid", owner_email="owner@example.org")
    fan = await wh.drained()
    await fail_all(wh, fan.deliveries)
    await wh.rows(
        "UPDATE outbox_webhook_delivery SET created_at = created_at - interval '6 days' RETURNING id"
    )

    def broken(_endpoint: Endpoint) -> NewMessage:
        msg = "the notice could not be built"
        raise RuntimeError(msg)

    with pytest.raises(RuntimeError):
        await wh.repo.disable_unhealthy(notice=broken)
    assert [(e.id, e.enabled) for e in await wh.repo.list_endpoints()] == [(sick, True)]
    assert await wh.rows("SELECT count(*) FROM outbox_message") == [(0,)]
