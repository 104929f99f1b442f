"""A property of the webhook host API on PostgreSQL: random operations by two tenants, each through
its own ``TenantWebhooks``, with ids aimed at either tenant's endpoints and events (and at none),
never let one tenant see or change the other's rows. After every operation the other tenant's
endpoints, secrets, events and deliveries are as they were, an operation aimed at the other's id
is refused exactly as a missing id, and a tenant's listings hold only its own."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.integration.test_webhook_tenant_api import URL, snapshot
from tests.support.postgres import empty_outbox

from outbox_adapters.postgres.webhooks import TenantWebhooks, WebhookRefused

pytestmark = pytest.mark.integration

TENANTS = ("acme", "globex")

#: Each operation, as the acting tenant's API runs it (aimed at ``endpoint`` or ``event``).
ACTIONS: dict[str, Callable[[TenantWebhooks, Any, int, int], Any]] = {
    "create": lambda api, conn, endpoint, event: api.create_endpoint(conn, URL, ["invoice.*"]),
    "update": lambda api, conn, endpoint, event: api.update_endpoint(
        conn, endpoint, description=f"by {api.tenant}"
    ),
    "disable": lambda api, conn, endpoint, event: api.disable_endpoint(conn, endpoint, "why"),
    "enable": lambda api, conn, endpoint, event: api.enable_endpoint(conn, endpoint),
    "rotate": lambda api, conn, endpoint, event: api.rotate_secret(conn, endpoint),
    "reveal": lambda api, conn, endpoint, event: api.reveal_secret(conn, endpoint),
    "delete": lambda api, conn, endpoint, event: api.delete_endpoint(conn, endpoint),
    "deliveries": lambda api, conn, endpoint, event: api.deliveries(conn, endpoint),
    "test": lambda api, conn, endpoint, event: api.send_test_event(conn, endpoint),
    "replay": lambda api, conn, endpoint, event: api.replay(conn, event),
    "list": lambda api, conn, endpoint, event: api.list_endpoints(conn),
}


#: (acting tenant, operation, which id it aims at: an index into every id made so far, wrapped).
operations = st.lists(
    st.tuples(st.sampled_from(TENANTS), st.sampled_from(sorted(ACTIONS)), st.integers(0, 50)),
    min_size=1,
    max_size=25,
)


def owners(dsn: str, table: str) -> dict[int, str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(f"SELECT id, tenant FROM {table}").fetchall()  # noqa: S608 - our names
    return dict(rows)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(plan=operations)
def test_random_operations_of_two_tenants_never_see_or_change_the_others(dsn: str, plan) -> None:
    empty_outbox(dsn)
    apis = {tenant: TenantWebhooks(tenant, guard=None) for tenant in TENANTS}
    made_endpoints: list[int] = [999_999]  # an id that never exists
    made_events: list[int] = [999_999]
    for actor, kind, aim in plan:
        other = TENANTS[1 - TENANTS.index(actor)]
        endpoint = made_endpoints[aim % len(made_endpoints)]
        event = made_events[aim % len(made_events)]
        endpoint_owner = owners(dsn, "outbox_webhook_endpoint").get(endpoint)
        event_owner = owners(dsn, "outbox_webhook_event").get(event)
        before = snapshot(dsn, other)
        try:
            with psycopg.connect(dsn) as conn, conn.transaction():
                result = ACTIONS[kind](apis[actor], conn, endpoint, event)
        except WebhookRefused as refused:
            result = refused
        assert snapshot(dsn, other) == before, (actor, kind)
        aimed_elsewhere = (
            event_owner != actor if kind == "replay" else endpoint_owner != actor
        ) and kind not in ("create", "list")
        if aimed_elsewhere:
            what = "event" if kind == "replay" else "endpoint"
            number = event if kind == "replay" else endpoint
            assert isinstance(result, WebhookRefused), (actor, kind, result)
            assert str(result) == f"there is no webhook {what} {number}"
        if kind == "create":
            made_endpoints.append(result.endpoint.id)
        if kind == "test" and not isinstance(result, WebhookRefused):
            made_events.append(result.event_id)
        if kind == "list":
            assert {e.tenant for e in result} <= {actor}
    for tenant in TENANTS:
        with psycopg.connect(dsn) as conn:
            listed = apis[tenant].list_endpoints(conn)
        assert {e.tenant for e in listed} <= {tenant}
