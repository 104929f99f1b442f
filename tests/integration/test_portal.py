"""The endpoint portal (outbox_adapters.portal) on a real database through its HTTP API: the tenant
comes from the host's ``tenant_of`` only, two tenants never see or change each other's endpoints
(another tenant's id is a 404 word for word like a missing one), registration and the secret
shown once, deliveries (with their attempts) without event data unless the host shows it, the
browser rules (cross-site 403, JSON only, no framing) and 400s naming the field."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Mount
from tests.support.browser import assert_unframeable
from tests.support.webhooks import GUARD, Webhooks

from outbox_adapters.portal import EndpointPortal
from outbox_core.attempt_log import appended, attempt_entry
from outbox_core.errors import ConfigurationError

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("empty_outbox")]

BASE = "/settings/webhooks"
URL = "http://127.0.0.1:9/in"
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def tenant_of(request: Request) -> str | None:
    """The host's authentication in these tests: a header naming the signed-in user's tenant."""
    return request.headers.get("x-tenant")


def client_of(portal: EndpointPortal, tenant: str | None) -> httpx.AsyncClient:
    app = Starlette(routes=[Mount(BASE, app=portal.app)])
    headers = {} if tenant is None else {"x-tenant": tenant}
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url=f"http://portal.test{BASE}",
        headers=headers,
    )


@pytest.fixture
async def portal(wh: Webhooks) -> EndpointPortal:
    return EndpointPortal(wh.pool, tenant_of, guard=GUARD)


@pytest.fixture
async def acme(portal: EndpointPortal) -> AsyncIterator[httpx.AsyncClient]:
    async with client_of(portal, "acme") as client:
        yield client


@pytest.fixture
async def globex(portal: EndpointPortal) -> AsyncIterator[httpx.AsyncClient]:
    async with client_of(portal, "globex") as client:
        yield client


async def register(client: httpx.AsyncClient, **fields: Any) -> dict[str, Any]:
    body = {"url": URL, "event_types": ["invoice.*"], **fields}
    got = await client.post("/api/endpoints", json=body)
    assert got.status_code == 201, got.text
    made: dict[str, Any] = got.json()
    return made


def test_the_portal_needs_tenant_of_and_a_guard(wh: Webhooks) -> None:
    with pytest.raises(TypeError, match="tenant_of"):
        EndpointPortal(wh.pool, None, guard=GUARD)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="guard"):
        EndpointPortal(wh.pool, tenant_of, guard=None)  # type: ignore[arg-type]


async def test_closed_when_the_host_names_no_tenant(portal: EndpointPortal, acme: Any) -> None:
    made = await register(acme)
    one = f"/api/endpoints/{made['endpoint']['id']}"
    async with client_of(portal, None) as anonymous:
        for method, path in [
            ("GET", "/"),
            ("GET", "/page.js"),
            ("GET", "/api/endpoints"),
            ("POST", "/api/endpoints"),
            ("GET", one),
            ("DELETE", one),
            ("POST", f"{one}/secret"),
            ("POST", f"{one}/test"),
        ]:
            got = await anonymous.request(method, path, json={} if method == "POST" else None)
            assert got.status_code == 401, (method, path)
            assert made["verify_with"] not in got.text


async def test_an_endpoint_registered_managed_and_deleted(acme: httpx.AsyncClient) -> None:
    made = await register(acme, description="billing", event_types=["invoice.*", "user.created"])
    endpoint = made["endpoint"]
    assert made["verify_with"].startswith("whsec_")
    assert endpoint["url"] == URL
    assert endpoint["event_types"] == ["invoice.*", "user.created"]
    assert endpoint["description"] == "billing"
    assert endpoint["enabled"]
    assert "tenant" not in endpoint
    one = f"/api/endpoints/{endpoint['id']}"

    listed = (await acme.get("/api/endpoints")).json()
    assert [e["id"] for e in listed["endpoints"]] == [endpoint["id"]]
    assert listed["shows_data"] is False

    revealed = await acme.post(f"{one}/secret", json={})
    assert revealed.json() == {"verify_with": made["verify_with"]}
    assert revealed.headers["cache-control"] == "no-store"
    rotated = (await acme.post(f"{one}/rotate", json={"overlap_hours": 1})).json()["verify_with"]
    assert rotated.startswith("whsec_")
    assert rotated != made["verify_with"]
    assert (await acme.post(f"{one}/secret", json={})).json() == {"verify_with": rotated}

    changed = await acme.patch(one, json={"event_types": ["order.*"], "description": ""})
    assert changed.status_code == 200, changed.text
    assert changed.json()["endpoint"]["event_types"] == ["order.*"]
    assert changed.json()["endpoint"]["description"] is None

    off = (await acme.post(f"{one}/disable", json={"reason": "maintenance"})).json()["endpoint"]
    assert (off["enabled"], off["disabled_reason"]) == (False, "maintenance")
    on = (await acme.post(f"{one}/enable", json={})).json()
    assert on["endpoint"]["enabled"]
    assert on["missed"] == []

    assert (await acme.delete(one)).json() == {"deleted": endpoint["id"]}
    assert (await acme.get(one)).status_code == 404
    assert (await acme.get("/api/endpoints")).json()["endpoints"] == []


async def test_a_v1a_endpoint_shows_its_public_key(acme: httpx.AsyncClient) -> None:
    made = await register(acme, scheme="v1a")
    assert made["endpoint"]["scheme"] == "v1a"
    assert made["verify_with"].startswith("whpk_")
    one = f"/api/endpoints/{made['endpoint']['id']}"
    assert (await acme.post(f"{one}/secret", json={})).json()["verify_with"] == made["verify_with"]


async def test_two_tenants_never_see_or_change_each_others_endpoints(
    wh: Webhooks, acme: httpx.AsyncClient, globex: httpx.AsyncClient
) -> None:
    theirs = (await register(acme))["endpoint"]
    ours = (await register(globex, url="http://127.0.0.1:9/globex"))["endpoint"]
    fanned = await wh.drained("invoice.paid", tenant="acme")
    missing = ours["id"] + theirs["id"] + 1000
    assert [e["id"] for e in (await globex.get("/api/endpoints")).json()["endpoints"]] == [
        ours["id"]
    ]
    attempts: list[tuple[str, str, Any]] = [
        ("GET", "", None),
        ("PATCH", "", {"url": "http://127.0.0.1:9/stolen"}),
        ("POST", "/disable", {"reason": "mine now"}),
        ("POST", "/enable", {}),
        ("POST", "/secret", {}),
        ("POST", "/rotate", {}),
        ("GET", "/deliveries", None),
        ("POST", "/replay", {"event_id": fanned.event_id}),
        ("POST", "/test", {}),
        ("DELETE", "", None),
    ]
    for method, tail, body in attempts:
        other = await globex.request(method, f"/api/endpoints/{theirs['id']}{tail}", json=body)
        absent = await globex.request(method, f"/api/endpoints/{missing}{tail}", json=body)
        assert other.status_code == absent.status_code == 404, (method, tail, other.text)
        assert re.sub(r"\d+", "N", other.json()["error"]) == re.sub(
            r"\d+", "N", absent.json()["error"]
        )
    # Nothing of acme's changed, nothing was sent for it, and its secret never crossed over.
    after = (await acme.get(f"/api/endpoints/{theirs['id']}")).json()["endpoint"]
    assert after == theirs
    assert await wh.rows("SELECT tenant, count(*) FROM outbox_webhook_event GROUP BY 1") == [
        ("acme", 1)
    ]
    assert await wh.rows("SELECT count(*) FROM outbox_webhook_delivery") == [(1,)]


async def test_the_tenant_never_comes_from_the_request(
    acme: httpx.AsyncClient, globex: httpx.AsyncClient
) -> None:
    await register(acme)
    smuggled = await globex.post(
        "/api/endpoints", json={"url": URL, "event_types": ["*"], "tenant": "acme"}
    )
    assert smuggled.status_code == 400
    assert smuggled.json()["field"] == "tenant"
    asked = await globex.get("/api/endpoints?tenant=acme", headers={"x-tenant-id": "acme"})
    assert asked.json()["endpoints"] == []


async def test_deliveries_show_event_data_only_through_the_hosts_show_data(
    wh: Webhooks, acme: httpx.AsyncClient
) -> None:
    endpoint = (await register(acme))["endpoint"]
    one = f"/api/endpoints/{endpoint['id']}"
    sent = (await acme.post(f"{one}/test", json={})).json()
    [delivery] = (await acme.get(f"{one}/deliveries")).json()["deliveries"]
    assert delivery["id"] == sent["delivery_id"]
    assert delivery["event_id"] == sent["event_id"]
    assert delivery["event_type"] == "webhook.test"
    assert delivery["status"] == "pending"
    assert "data" not in delivery
    assert delivery["attempts_log"] == []

    # Its attempts as the delivery marks store them (payload ``attempt_log``), oldest first.
    log = appended(None, attempt_entry(at=T0, status=500, error="HTTP 500", response="down"))
    log = appended(log, attempt_entry(at=T0 + timedelta(minutes=1), status=200, error=None,
                                      response=None))  # fmt: skip
    await wh.rows(
        "UPDATE outbox_webhook_delivery SET payload = payload || jsonb_build_object("
        "'attempt_log', %s::jsonb) WHERE id = %s RETURNING id",
        json.dumps(log),
        sent["delivery_id"],
    )
    [delivery] = (await acme.get(f"{one}/deliveries")).json()["deliveries"]
    assert delivery["attempts_log"] == [
        {"at": T0.isoformat(), "status": 500, "error": "HTTP 500", "response": "down"},
        {"at": (T0 + timedelta(minutes=1)).isoformat(), "status": 200, "error": None,
         "response": None},
    ]  # fmt: skip
    assert "data" not in delivery

    def show(event_type: str, data: Any) -> Any:
        return {"shown": event_type} if event_type == "webhook.test" else None

    async with client_of(
        EndpointPortal(wh.pool, tenant_of, guard=GUARD, show_data=show), "acme"
    ) as c:
        [shown] = (await c.get(f"{one}/deliveries")).json()["deliveries"]
        assert shown["data"] == {"shown": "webhook.test"}
        assert (await c.get("/api/endpoints")).json()["shows_data"] is True
        failed = (await c.get(f"{one}/deliveries?status=failed")).json()["deliveries"]
        assert failed == []


async def test_a_secret_is_never_logged(
    acme: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    made = await register(acme)
    one = f"/api/endpoints/{made['endpoint']['id']}"
    revealed = (await acme.post(f"{one}/secret", json={})).json()["verify_with"]
    rotated = (await acme.post(f"{one}/rotate", json={})).json()["verify_with"]
    for secret in (made["verify_with"], revealed, rotated):
        assert secret.removeprefix("whsec_") not in caplog.text


async def test_a_blocked_destination_is_a_400_about_the_url(acme: httpx.AsyncClient) -> None:
    got = await acme.post(
        "/api/endpoints", json={"url": "http://10.1.2.3/in", "event_types": ["invoice.paid"]}
    )
    assert got.status_code == 400
    assert got.json()["field"] == "url"
    assert (await acme.get("/api/endpoints")).json()["endpoints"] == []


async def test_every_response_forbids_framing_and_sniffing(acme: httpx.AsyncClient) -> None:
    made = await register(acme)
    one = f"/api/endpoints/{made['endpoint']['id']}"
    answers = [
        await acme.get("/"),
        await acme.get("/page.js"),
        await acme.get("/api/endpoints"),
        await acme.get(one),
        await acme.get("/nowhere"),
        await acme.post(f"{one}/secret", json={}),
    ]
    for answer in answers:
        assert_unframeable(answer)


@pytest.mark.parametrize(
    "headers",
    [
        {"sec-fetch-site": "cross-site", "origin": "https://evil.example"},
        {"sec-fetch-site": "same-site", "origin": "http://portal.test"},
        {"origin": "https://evil.example"},
        {"origin": "null"},
    ],
)
async def test_a_cross_site_change_is_refused_and_changes_nothing(
    acme: httpx.AsyncClient, headers: dict[str, str]
) -> None:
    made = await register(acme)
    one = f"/api/endpoints/{made['endpoint']['id']}"
    for method, path, body in [
        ("POST", "/api/endpoints", {"url": URL, "event_types": ["*"]}),
        ("POST", f"{one}/secret", {}),
        ("POST", f"{one}/rotate", {}),
        ("POST", f"{one}/disable", {"reason": "csrf"}),
        ("DELETE", one, None),
    ]:
        got = await acme.request(method, path, json=body, headers=headers)
        assert got.status_code == 403, (method, path)
        assert "cross-site request refused" in got.json()["error"]
        assert made["verify_with"] not in got.text
    assert (await acme.get("/api/endpoints")).json()["endpoints"] == [made["endpoint"]]
    assert (await acme.post(f"{one}/secret", json={})).json()["verify_with"] == made["verify_with"]


async def test_a_form_post_is_refused(acme: httpx.AsyncClient) -> None:
    got = await acme.post("/api/endpoints", data={"url": URL, "event_types": "*"})
    assert got.status_code == 415
    assert (await acme.get("/api/endpoints")).json()["endpoints"] == []


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/api/endpoints", {"event_types": ["*"]}, "url"),
        ("/api/endpoints", {"url": 7, "event_types": ["*"]}, "url"),
        ("/api/endpoints", {"url": "http://a b", "event_types": ["*"]}, "url"),
        ("/api/endpoints", {"url": URL}, "event_types"),
        ("/api/endpoints", {"url": URL, "event_types": []}, "event_types"),
        ("/api/endpoints", {"url": URL, "event_types": ["in voice"]}, "event_types"),
        ("/api/endpoints", {"url": URL, "event_types": ["invoice*"]}, "event_types"),
        ("/api/endpoints", {"url": URL, "event_types": ["*"], "scheme": "v2"}, "scheme"),
        ("/api/endpoints", {"url": URL, "event_types": ["*"], "description": 5}, "description"),
        (
            "/api/endpoints",
            {"url": URL, "event_types": ["*"], "description": "x" * 501},
            "description",
        ),
        ("{one}", {"description": "a\u0007b"}, "description"),
        ("/api/endpoints", {"url": URL, "event_types": ["*"], "owner": "x"}, "owner"),
        ("/api/endpoints", [1, 2], None),
        ("/api/endpoints", "[" * 5000, None),
        ("{one}", {}, None),
        ("{one}/disable", {}, "reason"),
        ("{one}/disable", {"reason": "  "}, "reason"),
        ("{one}/rotate", {"overlap_hours": -1}, "overlap_hours"),
        ("{one}/rotate", {"overlap_hours": True}, "overlap_hours"),
        ("{one}/replay", {"event_id": "1"}, "event_id"),
        ("{one}/replay", {"event_id": 2**63}, "event_id"),
        ("{one}/deliveries?status=lost", None, "status"),
        ("{one}/deliveries?limit=0", None, "limit"),
        ("{one}/deliveries?before_id=x", None, "before_id"),
    ],
)
async def test_a_bad_request_is_a_400_naming_the_field(
    acme: httpx.AsyncClient, path: str, body: object, field: str | None
) -> None:
    made = await register(acme)
    path = path.format(one=f"/api/endpoints/{made['endpoint']['id']}")
    if body is None:
        got = await acme.get(path)
    else:
        content = body if isinstance(body, str) else json.dumps(body)
        method = "PATCH" if path.endswith(str(made["endpoint"]["id"])) else "POST"
        got = await acme.request(
            method, path, content=content, headers={"content-type": "application/json"}
        )
    assert got.status_code == 400, got.text
    answer = got.json()
    assert answer["field"] == field
    if field is not None:
        assert field in answer["error"]
    assert (await acme.get("/api/endpoints")).json()["endpoints"] == [made["endpoint"]]


async def test_an_id_that_cannot_be_one_is_a_missing_endpoint(acme: httpx.AsyncClient) -> None:
    for text in ("0", "abc", "9" * 30, "-1"):
        got = await acme.get(f"/api/endpoints/{text}")
        assert got.status_code == 404, text


async def test_an_async_tenant_of_is_awaited_and_a_bad_tenant_is_the_hosts_error(
    wh: Webhooks, acme: httpx.AsyncClient
) -> None:
    made = await register(acme)

    async def signed_in(request: Request) -> str | None:
        return "acme" if request.headers.get("cookie") == "session=ann" else None

    async with client_of(EndpointPortal(wh.pool, signed_in, guard=GUARD), None) as client:
        assert (await client.get("/api/endpoints")).status_code == 401
        listed = await client.get("/api/endpoints", headers={"cookie": "session=ann"})
        assert listed.json()["endpoints"] == [made["endpoint"]]
    broken = EndpointPortal(wh.pool, lambda request: "ac\x00me", guard=GUARD)
    async with client_of(broken, None) as client:
        with pytest.raises(ConfigurationError, match="tenant_of returned"):
            await client.get("/api/endpoints")
