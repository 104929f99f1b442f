"""The pure destination rules (outbox_core.destinations): URL form, IPv4 spellings, address ranges."""

from __future__ import annotations

import contextlib
import ipaddress
import socket

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.support.hostile_urls import (
    BAD_FORMS,
    HOSTILE_URLS,
    INTERNAL_LITERALS,
    LOOPBACK_SPELLINGS,
)

from outbox_core.destinations import (
    DestinationPolicy,
    check_url,
    embedded_ipv4,
    judge,
    literal_address,
    parse_destination,
)
from outbox_core.errors import BlockedDestination, ConfigurationError, InvalidMessage

HTTP_OK = DestinationPolicy(require_https=False)
STRICT = DestinationPolicy()


@pytest.mark.parametrize(("url", "why"), HOSTILE_URLS)
def test_every_hostile_url_is_refused_under_the_default_policy(url, why):
    with pytest.raises(BlockedDestination):
        check_url(url, STRICT)


@pytest.mark.parametrize(("url", "why"), LOOPBACK_SPELLINGS + INTERNAL_LITERALS)
def test_every_internal_literal_is_refused_even_with_http_allowed(url, why):
    with pytest.raises(BlockedDestination, match="is not allowed"):
        check_url(url, HTTP_OK)


@pytest.mark.parametrize(("url", "why"), LOOPBACK_SPELLINGS)
def test_every_loopback_spelling_is_judged_as_loopback(url, why):
    with pytest.raises(BlockedDestination, match="loopback"):
        check_url(url, HTTP_OK)


@pytest.mark.parametrize(("url", "why"), BAD_FORMS)
def test_bad_forms_are_refused_with_http_allowed_too(url, why):
    with pytest.raises(BlockedDestination, match="webhook URL refused"):
        check_url(url, HTTP_OK)


def test_blocked_destination_is_an_invalid_message():
    assert issubclass(BlockedDestination, InvalidMessage)


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.example.com/in?token=SECRET-TOKEN-123",
        "https://169.254.169.254/x?token=SECRET-TOKEN-123",
        "https://user:SECRET-TOKEN-123@example.com/",
        "https://example.com:99999/SECRET-TOKEN-123",
    ],
)
def test_messages_never_repeat_the_path_query_or_credentials(url):
    if url.startswith("https://hooks.example.com"):
        check_url(url, STRICT)
        return
    with pytest.raises(BlockedDestination) as refused:
        check_url(url, STRICT)
    assert "SECRET-TOKEN-123" not in str(refused.value)


def test_userinfo_trick_names_the_rule():
    with pytest.raises(BlockedDestination, match="user information"):
        check_url("https://good.example@127.0.0.1/", STRICT)


def test_http_needs_the_policy_to_allow_it():
    with pytest.raises(BlockedDestination, match="https is required"):
        check_url("http://example.com/", STRICT)
    assert check_url("http://example.com/", HTTP_OK).port == 80


@pytest.mark.parametrize(
    ("url", "scheme", "host", "port"),
    [
        ("https://Hooks.Example.COM/a?b=c#d", "https", "hooks.example.com", 443),
        ("HTTPS://example.com:8443", "https", "example.com", 8443),
        ("http://example.com./", "http", "example.com.", 80),
        ("https://[2606:4700:0:0::1]:9/", "https", "2606:4700::1", 9),
        ("https://8.8.8.8/", "https", "8.8.8.8", 443),
        ("https://0x8.0x8.0x8.0x8/", "https", "8.8.8.8", 443),
        ("https://under_score.example/", "https", "under_score.example", 443),
        ("https://xn--exmple-cua.com/", "https", "xn--exmple-cua.com", 443),
    ],
)
def test_good_urls_give_their_destination(url, scheme, host, port):
    destination = check_url(url, HTTP_OK)
    assert (destination.scheme, destination.host, destination.port) == (scheme, host, port)
    assert "?" not in destination.origin


def test_the_allow_list_lets_an_internal_receiver_through_in_every_spelling():
    policy = DestinationPolicy.of(["127.0.0.0/8", "fd00::/8"], require_https=False)
    for url, _why in LOOPBACK_SPELLINGS:
        if "::1]" in url or "0:0:0:0:0:0:0:1" in url:
            continue  # IPv6 loopback is not in 127.0.0.0/8
        check_url(url, policy)
    check_url("http://[fd00:ec2::254]/", policy)
    with pytest.raises(BlockedDestination):
        check_url("http://169.254.169.254/", policy)
    with pytest.raises(BlockedDestination):
        check_url("http://[::1]/", policy)


@pytest.mark.parametrize("bad", ["10.0.0.0/33", "nonsense", "10.0.0.1/8", ""])
def test_a_bad_cidr_is_a_configuration_error_naming_it(bad):
    with pytest.raises(ConfigurationError, match="allowed destination"):
        DestinationPolicy.of([bad])


def test_one_string_is_not_a_list_of_cidrs():
    with pytest.raises(ConfigurationError, match="not one string"):
        DestinationPolicy.of("127.0.0.0/8")


def test_non_text_urls_and_overlong_urls_are_refused():
    with pytest.raises(BlockedDestination, match="must be text"):
        parse_destination(b"https://example.com/")  # type: ignore[arg-type]
    with pytest.raises(BlockedDestination, match="longer than"):
        parse_destination("https://example.com/" + "a" * 5000)


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("10.1.2.3", "private"),
        ("172.31.255.255", "private"),
        ("192.168.0.1", "private"),
        ("169.254.169.254", "link-local"),
        ("100.127.0.1", "carrier-grade NAT"),
        ("0.1.2.3", "unspecified"),
        ("224.0.0.251", "multicast"),
        ("239.255.255.250", "multicast"),
        ("255.255.255.255", "broadcast"),
        ("250.1.1.1", "reserved"),
        ("192.0.0.8", "IETF"),
        ("192.88.99.1", "6to4 relay"),
        ("198.19.1.1", "benchmarking"),
        ("203.0.113.9", "documentation"),
        ("::", "unspecified"),
        ("::1", "loopback"),
        ("fe80::1", "link-local"),
        ("febf::1", "link-local"),
        ("fc00::1", "unique-local"),
        ("fdff::1", "unique-local"),
        ("fec0::1", "site-local"),
        ("ff05::2", "multicast"),
        ("100::1", "discard-only"),
        ("64:ff9b:1::1", "local-use NAT64"),
        ("2001:db8::1", "documentation"),
        ("3fff::1", "documentation"),
        ("2001:2::1", "IETF"),
        ("5f00::1", "outside IPv6 global unicast"),
        ("4000::1", "outside IPv6 global unicast"),
        ("::ffff:10.0.0.1", "private"),
        ("64:ff9b::a9fe:a9fe", "link-local"),
        ("2002:c0a8:101::1", "private"),
        ("::ffff:0:a00:1", "private"),
        ("::0.0.0.2", "unspecified"),
    ],
)
def test_blocked_ranges_name_their_kind(address, kind):
    problem = judge(ipaddress.ip_address(address))
    assert problem is not None
    assert kind in problem


@pytest.mark.parametrize(
    "address",
    ["8.8.8.8", "1.1.1.1", "93.184.215.14", "2606:4700::1111", "::ffff:8.8.8.8", "2002:808:808::1"],
)
def test_public_addresses_pass(address):
    assert judge(ipaddress.ip_address(address)) is None


@pytest.mark.parametrize(
    ("address", "ipv4", "kind"),
    [
        ("::ffff:127.0.0.1", "127.0.0.1", "IPv4-mapped"),
        ("::ffff:0:127.0.0.1", "127.0.0.1", "IPv4-translated"),
        ("64:ff9b::7f00:1", "127.0.0.1", "NAT64"),
        ("2002:7f00:1::", "127.0.0.1", "6to4"),
        ("::127.0.0.1", "127.0.0.1", "IPv4-compatible"),
    ],
)
def test_embedded_ipv4_is_what_is_judged(address, ipv4, kind):
    assert embedded_ipv4(ipaddress.ip_address(address)) == (ipaddress.IPv4Address(ipv4), kind)
    assert "loopback address 127.0.0.1" in (judge(ipaddress.ip_address(address)) or "")


@pytest.mark.parametrize("address", ["::", "::1", "127.0.0.1", "2606:4700::1"])
def test_addresses_without_an_embedded_ipv4(address):
    assert embedded_ipv4(ipaddress.ip_address(address)) is None


# --- IPv4 spellings, against the C library's own reader --------------------------------------

_numeric_hosts = st.text(alphabet="0123456789abcdefxX.", min_size=1, max_size=24)


def _inet_aton(host: str) -> ipaddress.IPv4Address | None:
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except OSError:
        return None


@given(_numeric_hosts)
def test_every_ipv4_spelling_the_c_library_reads_is_read_the_same(host):
    expected = _inet_aton(host.removesuffix("."))
    if expected is not None:
        assert literal_address(host) == expected


@given(st.integers(0, 2**32 - 1), st.integers(1, 4), st.sampled_from(["dec", "oct", "hex"]))
def test_any_address_in_any_form_is_read_back(value, parts, base):
    chunks = [(value >> (8 * (3 - i))) & 0xFF for i in range(parts - 1)]
    chunks.append(value & (256 ** (5 - parts) - 1))
    spell = {"dec": "{}", "oct": "0{:o}", "hex": "0x{:x}"}[base]
    host = ".".join(spell.format(chunk) for chunk in chunks)
    assert literal_address(host) == ipaddress.IPv4Address(value)
    assert _inet_aton(host) == ipaddress.IPv4Address(value)


@given(_numeric_hosts)
def test_a_numeric_looking_host_is_an_address_or_refused(host):
    url = f"http://{host}/"
    try:
        destination = parse_destination(url, require_https=False)
    except BlockedDestination:
        return
    # Accepted: either an IPv4 literal the C library reads the same way, or a DNS name whose last
    # label is not a number (so no resolver takes it for an address).
    if destination.address is not None:
        assert _inet_aton(host.removesuffix(".")) in (destination.address, None)
    else:
        assert not destination.host.removesuffix(".").rsplit(".", 1)[-1].isdigit()


@given(st.text(max_size=60))
def test_arbitrary_text_never_raises_anything_but_blocked_destination(text):
    for url in (text, f"https://{text}/", f"http://{text}"):
        with contextlib.suppress(BlockedDestination):
            check_url(url, HTTP_OK)


@given(st.ip_addresses())
def test_every_address_is_judged_and_blocked_ones_say_why(address):
    problem = judge(address)
    target = embedded_ipv4(address)
    judged = target[0] if target else address
    if problem is not None:
        assert str(judged) in problem
    # Python's own notion agrees for what it calls loopback, link-local and multicast.
    if judged.is_loopback or judged.is_link_local or judged.is_multicast:
        assert problem is not None
    # The allow-list of the address itself always lets it through.
    allow = (ipaddress.ip_network(judged),)
    assert judge(address, allow) is None


def test_the_guard_describes_its_policy_in_one_line() -> None:
    from outbox_adapters.http import DestinationGuard  # noqa: PLC0415 - the adapter under test

    line = DestinationGuard(allow=("127.0.0.0/8",), require_https=False).describe()
    assert "http and https" in line
    assert "allowed anyway: 127.0.0.0/8" in line
    assert "https only" in DestinationGuard().describe()
    assert "allowed anyway: none" in DestinationGuard().describe()
