"""Security promise 5: no webhook request reaches an address the guard does not allow, whatever
the URL spelling, DNS answer or redirect (RELIABILITY.md, "Webhook URLs").

Every hostile destination below points at a CANARY: a real TCP listener on 127.0.0.1 that counts
the connections it accepts. The real sender (``HttpxWebhookSender``) and the real guard are used,
with an injected resolver where a DNS answer is the attack. The promise holds when the canary
counts 0 connections and every attempt ends permanent ("destination address not allowed" or
"webhook URL refused").
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
from collections.abc import Iterator
from datetime import timedelta

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.hostile_urls import HOSTILE_URLS, INTERNAL_LITERALS, LOOPBACK_SPELLINGS
from tests.support.receivers import CanaryListener, HttpReceiver, Reply

from outbox_adapters.http import DestinationGuard, HttpxWebhookSender
from outbox_adapters.http.sender import PinnedTransport
from outbox_core.errors import BlockedDestination
from outbox_core.outcomes import Outcome, OutcomeKind

pytestmark = pytest.mark.integration

BUDGET = timedelta(seconds=2)
PUBLIC = "93.184.215.14"


@pytest.fixture(scope="module")
def canary() -> Iterator[CanaryListener]:
    with CanaryListener() as listening:
        yield listening


#: Hostile cases run so far in this module, for the figure line of the last test.
CASES = {"run": 0}


@pytest.fixture(autouse=True)
def _canary_untouched(canary: CanaryListener) -> Iterator[None]:
    before = canary.connections
    yield
    assert canary.connections == before == 0, "a connection reached the canary"
    CASES["run"] += 1


def at_canary(url: str, port: int) -> str:
    """``url`` with the canary's port put after its host (hosts of the list carry no port)."""
    return re.sub(r"^([a-zA-Z]+://(?:\[[^\]]*\]|[^/:?#@]*))(?=[/?#]|$)", rf"\g<1>:{port}", url)


def answering(*answers: list[str]):
    """A resolver that gives ``answers[0]`` on the first call, ``answers[1]`` on the next, ..."""
    calls: list[str] = []

    async def resolve(host: str, port: int) -> list[str]:
        calls.append(host)
        return answers[min(len(calls), len(answers)) - 1]

    resolve.calls = calls  # type: ignore[attr-defined]
    return resolve


async def send(guard: DestinationGuard, url: str) -> Outcome:
    async with HttpxWebhookSender(guard) as sender:
        return await sender.send(url, headers={}, body=b"{}", budget=BUDGET)


@pytest.mark.parametrize(("url", "why"), HOSTILE_URLS, ids=[why for _, why in HOSTILE_URLS])
async def test_every_hostile_url_reaches_nothing(canary, url, why):
    target = at_canary(url, canary.port)
    guard = DestinationGuard(require_https=False)
    with pytest.raises(BlockedDestination):
        await guard.check_registration(target)
    outcome = await send(guard, target)
    assert outcome.kind is OutcomeKind.PERMANENT
    assert outcome.reason.startswith(("destination address not allowed", "webhook URL refused"))


@pytest.mark.parametrize(
    ("url", "why"),
    LOOPBACK_SPELLINGS + INTERNAL_LITERALS,
    ids=[why for _, why in LOOPBACK_SPELLINGS + INTERNAL_LITERALS],
)
async def test_the_connect_time_check_alone_stops_every_literal_spelling(canary, url, why):
    """httpx with the pinned transport but WITHOUT the sender's URL check: whatever host httpx
    hands the pool, the pinned backend judges it before any connect."""
    guard = DestinationGuard(require_https=False)
    transport = PinnedTransport(
        guard, ssl_context=httpx.create_ssl_context(), limits=httpx.Limits()
    )
    async with httpx.AsyncClient(transport=transport, trust_env=False) as client:
        with pytest.raises((BlockedDestination, httpx.InvalidURL, httpx.UnsupportedProtocol)):
            await client.post(at_canary(url, canary.port), content=b"{}")
    assert transport.backend.connections == 0


@pytest.mark.parametrize(
    "answer",
    [
        ["127.0.0.1"],
        ["::1"],
        ["169.254.169.254"],
        ["10.0.0.7"],
        ["100.64.0.1"],
        ["::ffff:127.0.0.1"],
        ["64:ff9b::7f00:1"],
        ["2002:7f00:1::"],
        ["fe80::1%eth0"],
        [PUBLIC, "127.0.0.1"],  # one bad answer among good ones is enough
    ],
)
async def test_a_name_resolving_to_a_blocked_address_reaches_nothing(canary, answer):
    guard = DestinationGuard(require_https=False, resolver=answering(answer))
    url = f"http://hooks.example:{canary.port}/in"
    with pytest.raises(BlockedDestination, match=r"hooks\.example is not allowed"):
        await guard.check_registration(url)
    outcome = await send(guard, url)
    assert outcome.kind is OutcomeKind.PERMANENT
    assert outcome.reason.startswith("destination address not allowed: webhook destination")


async def test_dns_rebinding_between_registration_and_connect_reaches_nothing(canary):
    """Public at registration, 127.0.0.1 (the canary) at connect: the answer the connection
    would use is the one judged."""
    resolver = answering([PUBLIC], ["127.0.0.1"])
    guard = DestinationGuard(require_https=False, resolver=resolver)
    url = f"http://rebind.example:{canary.port}/in"
    await guard.check_registration(url)  # passes: the name pointed at a public address then
    outcome = await send(guard, url)
    assert resolver.calls == ["rebind.example", "rebind.example"]
    assert outcome.kind is OutcomeKind.PERMANENT
    assert "loopback address 127.0.0.1" in outcome.reason


async def test_every_new_pool_connection_is_checked_again(canary):
    """Keep-alive does not carry a check over: when the pool opens a new connection, the name
    is resolved and judged again (here it has moved to the canary's address in between)."""
    with HttpReceiver() as hook:
        resolver = answering(["127.0.0.1"], ["127.0.0.2"])
        guard = DestinationGuard(allow=["127.0.0.1/32"], require_https=False, resolver=resolver)
        async with HttpxWebhookSender(guard) as sender:
            first = await sender.send(
                hook.url(host="moving.example"), headers={}, body=b"{}", budget=BUDGET
            )
            assert first.kind is OutcomeKind.SENT
            assert sender.transport is not None
            await sender.transport.aclose()  # the idle connection is gone
            sender._client = None  # next send builds a new pool, as after a keep-alive expiry
            second = await sender.send(
                hook.url(host="moving.example"), headers={}, body=b"{}", budget=BUDGET
            )
    assert second.kind is OutcomeKind.PERMANENT
    assert "127.0.0.2" in second.reason


@pytest.mark.parametrize(
    "location",
    ["http://169.254.169.254/latest/meta-data/", "http://127.0.0.1:{port}/", "/relative"],
)
async def test_a_redirect_to_an_internal_address_is_not_followed(canary, location):
    reply = Reply.redirect(location.format(port=canary.port))
    with HttpReceiver(reply, then=Reply.status(500)) as hook:
        guard = DestinationGuard(allow=["127.0.0.1/32"], require_https=False)
        outcome = await send(guard, hook.url())
    assert outcome.kind is OutcomeKind.TRANSIENT
    assert outcome.reason == "redirect not followed (status 302)"
    assert len(hook.requests) == 1


# --- random spellings of random blocked addresses --------------------------------------------


def _inside(cidr: str) -> st.SearchStrategy[ipaddress.IPv4Address]:
    net = ipaddress.IPv4Network(cidr)
    return st.integers(0, net.num_addresses - 1).map(lambda offset: net[offset])


_blocked_v4 = st.sampled_from(
    ["127.0.0.0/8", "10.0.0.0/8", "169.254.0.0/16", "100.64.0.0/10", "192.168.0.0/16", "0.0.0.0/8"]
).flatmap(_inside)


def _spell(address: ipaddress.IPv4Address, form: str, parts: int) -> str:
    value = int(address)
    chunks = [(value >> (8 * (3 - i))) & 0xFF for i in range(parts - 1)]
    chunks.append(value & (256 ** (5 - parts) - 1))
    if form == "mapped":
        return f"[::ffff:{address}]"
    if form == "nat64":
        return f"[64:ff9b::{value >> 16:x}:{value & 0xFFFF:x}]"
    if form == "6to4":
        return f"[2002:{value >> 16:x}:{value & 0xFFFF:x}::1]"
    pattern = {"dec": "{}", "oct": "0{:o}", "hex": "0x{:x}"}[form]
    return ".".join(pattern.format(chunk) for chunk in chunks)


@settings(deadline=None)
@given(
    _blocked_v4,
    st.sampled_from(["dec", "oct", "hex", "mapped", "nat64", "6to4"]),
    st.integers(1, 4),
)
def test_any_spelling_of_any_blocked_address_is_refused_at_connect(canary, address, form, parts):
    host = _spell(address, form, parts)
    guard = DestinationGuard(require_https=False)
    with pytest.raises(BlockedDestination):
        guard.check_url(f"http://{host}:{canary.port}/")
    backend = guard.network_backend()
    with pytest.raises(BlockedDestination):
        asyncio.run(backend.connect_tcp(host.strip("[]"), canary.port, timeout=2))
    assert backend.connections == 0


def test_the_figure_line_counts_every_case_and_no_connection(canary, report):
    """Last in the module: the promise's figure over every case above (each checked the canary)."""
    assert CASES["run"] >= len(HOSTILE_URLS)
    assert canary.connections == 0
    report(f"P5 hostile_cases={CASES['run']} canary_connections={canary.connections}")
