"""Two per-endpoint controls of the webhook repository (ADR 0018), for the in-memory repository
and PostgreSQL's: an endpoint's rate cap (``max_per_second``) round-trips from ``add_endpoint``
to ``endpoint``, ``list_endpoints`` and the attempt's ``delivery_target``, and is refused when it
is not a whole number of at least 1; ``endpoint_health`` says how an endpoint is doing (last
success, last failure, the failure streak since the last success, enabled or why not).
"""

from __future__ import annotations

import pytest

from outbox_adapters.webhook_model import EndpointHealth, WebhookRefused
from outbox_core.errors import InvalidMessage
from outbox_core.messages import Mark


async def test_an_endpoints_rate_cap_round_trips_to_the_endpoint_and_its_delivery_targets(wh):
    capped = await wh.endpoint("invoice.paid", max_per_second=3)
    uncapped = await wh.endpoint("invoice.paid")

    endpoint = await wh.repo.endpoint(capped)
    assert endpoint is not None
    assert endpoint.max_per_second == 3
    assert {e.id: e.max_per_second for e in await wh.repo.list_endpoints()} == {
        capped: 3,
        uncapped: None,
    }
    fan = await wh.drained()
    targets = await wh.repo.delivery_targets([int(d.id) for d in fan.deliveries])
    assert {t.endpoint_id: t.max_per_second for t in targets.values()} == {
        capped: 3,
        uncapped: None,
    }
    one = await wh.repo.delivery_target(int(fan.deliveries[0].id))
    assert one is not None
    assert one.max_per_second == {capped: 3, uncapped: None}[one.endpoint_id]
    disabled = await wh.repo.disable_endpoint(capped, "paused")
    assert disabled.max_per_second == 3


@pytest.mark.parametrize("bad", [0, -1, 2.5, "5", True])
async def test_a_rate_cap_that_is_not_a_whole_number_of_at_least_one_is_refused(wh, bad):
    with pytest.raises(
        InvalidMessage, match=r"max_per_second is None \(no cap\) or a whole number"
    ):
        await wh.endpoint("invoice.paid", max_per_second=bad)
    assert await wh.repo.list_endpoints() == []


async def test_endpoint_health_reports_the_last_success_the_last_failure_and_the_streak(wh):
    sick = await wh.endpoint("invoice.paid")
    fresh = await wh.repo.endpoint_health(sick)
    assert fresh == EndpointHealth(
        endpoint_id=sick,
        enabled=True,
        disabled_reason=None,
        disabled_at=None,
        last_success_at=None,
        last_failure_at=None,
        failure_streak=0,
    )

    async def resolve(failed: bool) -> None:
        (delivery,) = (await wh.drained()).deliveries
        done = (
            Mark.failed(delivery, "HTTP 500")
            if failed
            else Mark.dispatched(delivery, scrub_keys=frozenset())
        )
        await wh.deliveries.mark_if_pending(done)
        await wh.later()

    await resolve(failed=True)
    await resolve(failed=False)
    success = await wh.later()
    await resolve(failed=True)
    await resolve(failed=True)
    failure = await wh.later()

    health = await wh.repo.endpoint_health(sick)
    assert health.failure_streak == 2
    assert health.last_success_at is not None
    assert health.last_success_at < success
    assert health.last_failure_at is not None
    assert success < health.last_failure_at < failure
    assert health.enabled

    await resolve(failed=False)
    await wh.repo.disable_endpoint(sick, "maintenance")
    after = await wh.repo.endpoint_health(sick)
    assert after.failure_streak == 0
    assert after.last_failure_at == health.last_failure_at
    assert after.last_success_at is not None
    assert after.last_success_at > failure
    assert not after.enabled
    assert after.disabled_reason == "maintenance"
    assert after.disabled_at is not None


async def test_the_health_of_an_unknown_endpoint_is_refused(wh):
    with pytest.raises(WebhookRefused, match="there is no webhook endpoint 999"):
        await wh.repo.endpoint_health(999)
