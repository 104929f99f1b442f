"""The in-app feed's parts that need no server (ADR 0022): settings, principals, cursors, the
scope a notification names, and the fan-out's coalescing (no socket: nothing here connects)."""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from starlette.requests import HTTPConnection
from starlette.types import Message
from tests.support.feed import header_principal

from outbox_adapters.cli.prune import parse_duration
from outbox_adapters.feed import Feed, FeedSettings, Principal
from outbox_adapters.feed.stream import PING, REFRESH, StreamSignal, _stream
from outbox_adapters.postgres.channels import Cursor, Scope, ScopeListener
from outbox_adapters.postgres.channels.push import scope_of
from outbox_core.errors import ConfigurationError, StoreUnavailable

NOWHERE = "postgresql://nowhere.invalid/feed"


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"ping_interval": 0}, "ping_interval must be positive"),
        ({"ping_interval": float("inf")}, "ping_interval must be a finite number"),
        ({"stream_cap": -1}, "stream_cap must be positive"),
        ({"stream_cap": "20m"}, "stream_cap must be a finite number"),
        ({"send_timeout": 0}, "send_timeout must be positive"),
        ({"stream_cap_spread": 1}, "stream_cap_spread must be a fraction in [0, 1)"),
        ({"stream_cap_spread": -0.1}, "stream_cap_spread must be a fraction in [0, 1)"),
        ({"page_size": 0}, "page_size must be a whole number of at least 1"),
        ({"max_page_size": 2.5}, "max_page_size must be a whole number of at least 1"),
        ({"page_size": 30, "max_page_size": 20}, "page_size (30) must not exceed max_page_size"),
        ({"max_streams_per_principal": 0}, "max_streams_per_principal must be a whole number"),
        ({"max_streams": 1.5}, "max_streams must be a whole number of at least 1"),
        ({"allowed_origins": ["app.example.com"]}, "allowed_origins must be scheme://host"),
        ({"allowed_origins": ["null"]}, "allowed_origins must be scheme://host"),
    ],
)
def test_a_bad_setting_is_refused_at_construction_naming_it(kwargs, named: str):
    with pytest.raises(ConfigurationError, match=re.escape(named)):
        FeedSettings(**kwargs)


def test_the_defaults_are_the_adr_s():
    settings = FeedSettings()
    assert (settings.ping_interval, settings.stream_cap) == (25.0, 1200.0)
    assert (settings.max_streams_per_principal, settings.max_streams) == (10, 1000)
    assert settings.allowed_origins == ()


def test_a_principal_gives_its_scope_and_nothing_else():
    assert Principal.platform_operator().scope == Scope.platform()
    assert Principal.tenant_user("acme").scope == Scope.tenant("acme")
    assert Scope.tenant("acme").key == "tenant:acme"
    assert Scope.platform().key == "platform"
    with pytest.raises(ValueError, match="non-empty tenant id"):
        Principal.tenant_user("")
    with pytest.raises(ValueError, match="belongs to no tenant"):
        Principal("platform_operator", "acme")
    with pytest.raises(ValueError, match="platform_operator or a tenant_user"):
        Principal("admin")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="non-empty tenant id"):
        Scope("tenant", None)


@given(
    at=st.datetimes(
        min_value=datetime(1970, 1, 1),  # noqa: DTZ001 - hypothesis takes naive bounds
        max_value=datetime(9000, 1, 1),  # noqa: DTZ001
        timezones=st.just(UTC),
    ),
    row_id=st.integers(1, 2**63 - 1),
)
def test_a_cursor_survives_its_text_exactly(at: datetime, row_id: int):
    cursor = Cursor(at, row_id)
    assert Cursor.parse(cursor.text) == cursor


@pytest.mark.parametrize(
    ("payload", "scope"),
    [
        ('{"audience": "tenant", "tenant_id": "acme"}', Scope.tenant("acme")),
        ('{"audience": "platform", "tenant_id": null}', Scope.platform()),
        ('{"audience": "tenant", "tenant_id": null}', None),  # an id too long to announce
        ('{"audience": "platform", "tenant_id": "acme"}', None),
        ('{"audience": "nobody", "tenant_id": null}', None),
        ("not json", None),
        ("[]", None),
        ("{}", None),
    ],
)
def test_the_scope_a_notification_names(payload: str, scope: Scope | None):
    assert scope_of(payload) == scope


async def test_the_fan_out_signals_the_scope_s_streams_once_however_many_notifications():
    listener = ScopeListener(NOWHERE)  # nothing connects: the fan-out is driven by hand
    acme = [listener.subscribe(Scope.tenant("acme")) for _ in range(3)]
    globex = listener.subscribe(Scope.tenant("globex"))
    platform = listener.subscribe(Scope.platform())
    for _ in range(1000):  # a burst while nobody reads: each signal is one slot, set once
        listener._notified('{"audience": "tenant", "tenant_id": "acme"}')
    assert all(signal.is_set() for signal in acme)
    assert not globex.is_set()
    assert not platform.is_set()

    listener._notified("garbage")  # a scope that can't be trusted: everyone refetches
    assert globex.is_set()
    assert platform.is_set()
    for signal in [*acme, globex, platform]:
        signal.clear()
    listener._connected()  # after every (re)connect: everyone refetches
    assert all(signal.is_set() for signal in [*acme, globex, platform])


class FakeClient:
    """The ASGI side of one stream: what was sent, a gate that can hold writes, a disconnect."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.writable = asyncio.Event()
        self.writable.set()
        self.gone = asyncio.Event()
        #: Set once a write has started (it may then hang on ``writable``).
        self.writing = asyncio.Event()

    async def send(self, message: Message) -> None:
        self.writing.set()
        await self.writable.wait()
        self.sent.append(message.get("body", b"<start>"))

    async def receive(self) -> Message:
        await self.gone.wait()
        return {"type": "http.disconnect"}


def stream_of(feed: Feed, client: FakeClient, cap: float = 5.0) -> asyncio.Task[None]:
    signal = StreamSignal(Scope.tenant("acme").key)
    feed.listener.add(signal)
    return asyncio.ensure_future(_stream(feed, signal, client.send, client.receive, cap))


ACME_NOTE = '{"audience": "tenant", "tenant_id": "acme"}'


async def test_a_stream_owes_a_slow_client_one_refresh_not_a_backlog():
    feed = Feed(NOWHERE, header_principal)  # no I/O in the constructor
    client = FakeClient()
    task = stream_of(feed, client)
    await asyncio.sleep(0)
    client.writable.clear()  # the client stops reading: the first write will hang
    feed.listener._notified(ACME_NOTE)
    await asyncio.wait_for(client.writing.wait(), 1)
    for _ in range(100):  # while that write hangs, the fan-out goes on and never waits
        feed.listener._notified(ACME_NOTE)
    client.writable.set()
    await asyncio.sleep(0.05)
    assert client.sent == [REFRESH, REFRESH], "the 100 were coalesced into one refresh"
    assert REFRESH == b"event: refresh\r\ndata:\r\n\r\n"  # no payload: the client refetches
    feed.closing = True
    feed.listener.refresh_all()
    await asyncio.wait_for(task, 1)
    assert client.sent[-1] == b""  # the response ended properly
    assert feed.open_streams == 0


async def test_a_stream_pings_when_idle_and_ends_at_its_cap():
    feed = Feed(NOWHERE, header_principal, settings=FeedSettings(ping_interval=0.02))
    client = FakeClient()
    await asyncio.wait_for(stream_of(feed, client, cap=0.3), 2)
    *pings, end = client.sent
    assert len(pings) >= 4  # about one every 0.02 s until the cap
    assert set(pings) == {PING}
    assert end == b""


async def test_a_write_stuck_past_the_cap_is_cancelled_and_the_stream_ends():
    feed = Feed(NOWHERE, header_principal, settings=FeedSettings(send_timeout=0.05))
    client = FakeClient()
    client.writable.clear()  # nothing will ever be written
    task = stream_of(feed, client, cap=0.05)
    await asyncio.sleep(0)
    feed.listener._notified(ACME_NOTE)
    await asyncio.wait_for(task, 1)  # cap + send_timeout: ended, not an error
    assert not task.cancelled()
    assert feed.open_streams == 0


async def test_a_client_that_disconnects_ends_its_stream():
    feed = Feed(NOWHERE, header_principal)
    client = FakeClient()
    task = stream_of(feed, client)
    await asyncio.sleep(0)
    client.gone.set()
    await asyncio.wait_for(task, 1)
    assert feed.open_streams == 0


class DownStore:
    """A feed store whose database is gone."""

    async def unread(self, scope: Scope) -> int:
        raise StoreUnavailable("connection refused")


async def test_an_async_authenticate_is_awaited_and_an_outage_is_a_503():
    async def authenticate(connection: HTTPConnection) -> Principal | None:
        await asyncio.sleep(0)
        return header_principal(connection)

    feed = Feed(NOWHERE, authenticate)
    feed._store = DownStore()  # type: ignore[assignment]
    transport = httpx.ASGITransport(app=feed.app)  # in-process: no socket
    async with httpx.AsyncClient(transport=transport, base_url="http://feed") as client:
        got = await client.get("/notifications/unread-count", headers={"X-Principal": "platform"})
        assert got.status_code == 503
        assert got.json() == {"error": "the feed's database is unavailable; try again shortly"}
        nobody = await client.get("/notifications/unread-count")
        assert nobody.status_code == 401


def test_an_unstarted_feed_says_how_to_start_it():
    with pytest.raises(RuntimeError, match="async with feed"):
        _ = Feed(NOWHERE, header_principal).store


@pytest.mark.parametrize(
    ("text", "age"),
    [
        ("90d", timedelta(days=90)),
        ("12h", timedelta(hours=12)),
        ("30m", timedelta(minutes=30)),
        ("45s", timedelta(seconds=45)),
        ("2W", timedelta(weeks=2)),
    ],
)
def test_prune_durations(text: str, age: timedelta):
    assert parse_duration(text) == age


@pytest.mark.parametrize("text", ["", "0d", "90", "d", "1.5h", "-3d", "3 days", "3y"])
def test_a_bad_prune_duration_says_what_it_takes(text: str):
    with pytest.raises(ValueError, match="is not a positive duration such as 90d"):
        parse_duration(text)
