"""Tenants and subscriptions in the webhook repository's contract (docs/guides/webhooks.md,
"Tenants"), for the in-memory repository and PostgreSQL's alike:

- an event fans out to its own tenant's enabled endpoints subscribed to its type, never to another
  tenant's, whatever they subscribe to;
- a replay goes to the event's tenant only: to all of its endpoints, or to one of them; another
  tenant's endpoint is refused as if it did not exist;
- enabling an endpoint reports what it missed of its own tenant's events only;
- ``list_endpoints(tenant=)`` lists one tenant's;
- wildcard subscriptions (``invoice.*``) take the types under their prefix, and nothing else;
- a tenant that is missing or not text is refused with the rule, and nothing is written.
"""

from __future__ import annotations

import pytest
from tests.support.webhooks import BIRTH, new_secret, token

from outbox_adapters.webhook_model import WebhookRefused
from outbox_core.errors import InvalidMessage


def targets(fan) -> list[int]:
    return sorted(d.payload["endpoint_id"] for d in fan.deliveries)


async def test_an_event_fans_out_to_its_own_tenants_endpoints_only(wh):
    acme_paid = await wh.endpoint("invoice.paid", tenant="acme")
    acme_all = await wh.endpoint("*", tenant="acme")
    globex_paid = await wh.endpoint("invoice.paid", tenant="globex")
    globex_all = await wh.endpoint("*", tenant="globex")
    await wh.endpoint("*", tenant="acme-2")  # a tenant whose id starts like another's

    assert targets(await wh.drained(tenant="acme")) == [acme_paid, acme_all]
    assert targets(await wh.drained(tenant="globex")) == [globex_paid, globex_all]
    assert targets(await wh.drained(tenant="initech")) == []  # no endpoint: nobody gets it
    assert targets(await wh.drained("user.created", tenant="globex")) == [globex_all]


async def test_ordering_keys_of_two_tenants_do_not_wait_for_each_other(wh):
    acme = await wh.endpoint("*", tenant="acme")
    await wh.endpoint("*", tenant="globex")
    await wh.enqueue(tenant="globex", ordering_key="order-1")
    await wh.enqueue(tenant="acme", ordering_key="order-1")
    rows = await wh.claim_outbox()
    fans = await wh.repo.fan_out_many(rows, birth_lease=BIRTH, birth_token=token())
    # Same key, one batch, but different tenants (so different endpoints): neither waits.
    assert [len(f.deliveries) for f in fans] == [1, 1]
    assert fans[1].deliveries[0].payload["endpoint_id"] == acme


async def test_a_replay_stays_inside_the_events_tenant(wh):
    mine = await wh.endpoint("invoice.paid", tenant="acme")
    theirs = await wh.endpoint("invoice.paid", tenant="globex")
    fan = await wh.drained(tenant="acme")
    every = await wh.repo.replay(fan.event_id, birth_lease=BIRTH, birth_token=token())
    assert targets(every) == [mine]
    with pytest.raises(WebhookRefused, match=f"there is no webhook endpoint {theirs}"):
        await wh.repo.replay(
            fan.event_id, endpoint_id=theirs, birth_lease=BIRTH, birth_token=token()
        )
    lonely = await wh.drained("invoice.paid", tenant="initech")
    with pytest.raises(WebhookRefused, match="no enabled endpoint subscribes"):
        await wh.repo.replay(lonely.event_id, birth_lease=BIRTH, birth_token=token())


async def test_enable_reports_what_the_endpoint_missed_of_its_own_tenant_only(wh):
    endpoint = await wh.endpoint("invoice.paid", tenant="acme")
    await wh.repo.disable_endpoint(endpoint, "receiver down")
    missed = await wh.drained(tenant="acme")
    await wh.drained(tenant="globex")  # same type, another tenant: not missed by this endpoint
    assert (await wh.repo.enable_endpoint(endpoint)).event_ids == (missed.event_id,)


async def test_endpoints_are_listed_per_tenant(wh):
    a1 = await wh.endpoint("*", tenant="acme")
    g1 = await wh.endpoint("*", tenant="globex")
    a2 = await wh.endpoint("*", tenant="acme")
    assert [e.id for e in await wh.repo.list_endpoints(tenant="acme")] == [a1, a2]
    assert [e.id for e in await wh.repo.list_endpoints(tenant="globex")] == [g1]
    assert [e.id for e in await wh.repo.list_endpoints(tenant="nobody")] == []
    assert [e.id for e in await wh.repo.list_endpoints()] == [a1, g1, a2]
    assert {e.tenant for e in await wh.repo.list_endpoints()} == {"acme", "globex"}


@pytest.mark.parametrize(
    ("event_type", "expected"),
    [
        ("invoice.paid", True),
        ("invoice.line.added", True),
        ("invoice", False),
        ("invoices.paid", False),
        ("user.created", False),
    ],
)
async def test_a_wildcard_subscription_takes_the_types_under_its_prefix(wh, event_type, expected):
    endpoint = await wh.endpoint("invoice.*")
    assert targets(await wh.drained(event_type)) == ([endpoint] if expected else [])


@pytest.mark.parametrize("bad", ["*.paid", "invoice.**", ".*", "in voice.*", "*invoice"])
async def test_a_malformed_wildcard_is_refused_at_registration(wh, bad):
    with pytest.raises(InvalidMessage, match="event type"):
        await wh.repo.add_endpoint(
            "https://hooks.example/in", [bad], tenant="acme", secret=new_secret()
        )
    assert await wh.repo.list_endpoints() == []


@pytest.mark.parametrize("bad", [None, "", "a\x00b", "line\nbreak", "x" * 201, 7])
async def test_an_endpoint_without_a_usable_tenant_is_refused_with_the_rule(wh, bad):
    with pytest.raises(InvalidMessage, match="tenant"):
        await wh.repo.add_endpoint(
            "https://hooks.example/in", ["*"], tenant=bad, secret=new_secret()
        )
    assert await wh.repo.list_endpoints() == []
