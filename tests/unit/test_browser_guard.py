"""The browser guard's parts that need no server (outbox_adapters.browser; docs/guides/feed.md,
"Browsers"): origins as the rule compares them, the cross-site verdict, the stream slots."""

from __future__ import annotations

import pytest
from starlette.datastructures import Headers

from outbox_adapters.browser import BrowserGuard, cross_site_refusal, origin_of
from outbox_adapters.feed.slots import StreamSlots


@pytest.mark.parametrize(
    ("url", "origin"),
    [
        ("http://host", "http://host:80"),
        ("HTTPS://App.Example.com/", "https://app.example.com:443"),
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
        ("http://[::1]:9", "http://::1:9"),
        ("null", None),
        ("app.example.com", None),
        ("http://host:99999", None),
        ("", None),
    ],
)
def test_an_origin_is_scheme_host_and_port_always_written(url: str, origin: str | None):
    assert origin_of(url) == origin


def verdict(headers: dict[str, str], allowed: frozenset[str] = frozenset()) -> str | None:
    scope = {"type": "http", "scheme": "http"}
    return cross_site_refusal(scope, Headers({"host": "host:8000", **headers}), allowed)


@pytest.mark.parametrize(
    ("headers", "refused"),
    [
        ({}, False),
        ({"sec-fetch-site": "same-origin", "origin": "http://host:8000"}, False),
        ({"sec-fetch-site": "none"}, False),
        ({"sec-fetch-site": "same-site", "origin": "http://host:8001"}, True),
        ({"sec-fetch-site": "cross-site"}, True),
        ({"origin": "http://host:8000"}, False),
        ({"origin": "http://host:8001"}, True),
        ({"origin": "https://host:8000"}, True),
        ({"origin": "null"}, True),
        ({"origin": "garbage"}, True),
    ],
)
def test_the_cross_site_verdict(headers: dict[str, str], refused: bool):
    assert (verdict(headers) is not None) is refused


def test_a_listed_origin_is_accepted_from_another_site():
    listed = frozenset({"https://app.example.com:443"})
    headers = {"sec-fetch-site": "cross-site", "origin": "https://app.example.com"}
    assert verdict(headers, listed) is None
    assert verdict({**headers, "origin": "https://other.example"}, listed) is not None


def test_an_allowed_origin_that_is_not_one_is_refused_at_construction():
    with pytest.raises(ValueError, match="not scheme://host"):
        BrowserGuard(lambda *_: None, allowed_origins=["app.example.com"])  # type: ignore[arg-type]


def test_stream_slots_cap_a_principal_then_the_process_and_give_back():
    slots = StreamSlots(per_principal=2, total=3)
    assert [slots.take("a"), slots.take("a"), slots.take("a")] == [None, None, "principal"]
    assert slots.take("b") is None
    assert slots.take("c") == "process"
    slots.give_back("a")
    assert (slots.open, slots.held("a")) == (2, 1)
    assert slots.take("c") is None
