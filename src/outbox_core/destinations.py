"""Which webhook destinations may be contacted: the pure half of the outbound destination guard.

ADR 0016; docs/reliability.md, "Hostile input" (webhook URLs) and security promise 5. The adapter
(``outbox_adapters.http.guard``) resolves host names and connects; this module only reads text and
judges addresses, with no DNS and no I/O::

    parse_destination(url, require_https=...)   the URL's rules; a Destination (scheme, host, port)
      scheme                  http or https only; https unless the policy allows http
      authority               no userinfo ("https://good.example@127.0.0.1" is refused outright),
                              a host, a port of 1..65535 (digits only) if one is given
      host                    an IPv6 literal in brackets (no zone id), an IPv4 literal in ANY
                              spelling inet_aton() reads, or an ASCII DNS name; a name whose last
                              label is a number (``example.123``, ``1.2.3.4.5``) is refused: it
                              is neither a valid address nor a possible DNS name
      anywhere                no whitespace, control, backslash or non-ASCII character

    literal_address(host)   "2130706433", "0x7f.1", "0177.0.0.1", "127.1" -> 127.0.0.1

    judge(address, allow)   None if the address may be contacted, else the reason
      embedded IPv4 first     IPv4-mapped ::ffff:0:0/96, IPv4-translated ::ffff:0:0:0/96,
                              IPv4-compatible ::/96, NAT64 64:ff9b::/96, 6to4 2002::/16: the
                              IPv4 inside is what the packet reaches, so it is what is judged
      allow-list              an address (or its embedded IPv4) inside an allowed CIDR passes
      blocked                 the special-purpose ranges of ``_BLOCKED_V4`` / ``_BLOCKED_V6``
                              (loopback, private, link-local incl. 169.254.169.254, CGNAT,
                              multicast, reserved, unspecified, broadcast, unique-local,
                              site-local, documentation, benchmarking, ...), and every IPv6
                              address outside global unicast 2000::/3

Errors are :class:`~outbox_core.errors.BlockedDestination` naming the reason and at most the host:
a webhook URL's path and query may carry a token, so they never appear in a message.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Sequence
from typing import Final

import attrs

from outbox_core.errors import BlockedDestination, ConfigurationError

__all__ = [
    "Address",
    "Destination",
    "DestinationPolicy",
    "Network",
    "check_address",
    "check_url",
    "embedded_ipv4",
    "judge",
    "literal_address",
    "parse_destination",
]

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

#: Longer URLs are refused (a registration typo or an attack, never a receiver's real address).
MAX_URL_LENGTH: Final = 4096
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}
_SCHEME: Final = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")
#: Printable ASCII without space and backslash (a backslash is a path separator to some parsers).
_URL_CHARS: Final = re.compile(r"[!-\[\]-~]*")
_LABEL: Final = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")
#: WHATWG URL "ends in a number": a last label like this makes the host an IPv4 literal or nothing.
_NUMERIC_LABEL: Final = re.compile(r"[0-9]+|0[xX][0-9A-Fa-f]*")
_MAX_HOST: Final = 253
_HINT: Final = " (an internal receiver you trust can be allowed by its CIDR: --allow-destination)"


def _net(text: str) -> Network:
    return ipaddress.ip_network(text)


#: (network, what it is). IANA IPv4 Special-Purpose Address Registry, plus multicast and class E.
_BLOCKED_V4: Final[tuple[tuple[Network, str], ...]] = tuple(
    (_net(cidr), kind)
    for cidr, kind in (
        ("0.0.0.0/8", "unspecified ('this network')"),
        ("10.0.0.0/8", "private"),
        ("100.64.0.0/10", "carrier-grade NAT (shared)"),
        ("127.0.0.0/8", "loopback"),
        ("169.254.0.0/16", "link-local (cloud metadata)"),
        ("172.16.0.0/12", "private"),
        ("192.0.0.0/24", "IETF protocol assignment"),
        ("192.0.2.0/24", "documentation"),
        ("192.88.99.0/24", "6to4 relay anycast (reserved)"),
        ("192.168.0.0/16", "private"),
        ("198.18.0.0/15", "benchmarking"),
        ("198.51.100.0/24", "documentation"),
        ("203.0.113.0/24", "documentation"),
        ("224.0.0.0/4", "multicast"),
        ("255.255.255.255/32", "broadcast"),
        ("240.0.0.0/4", "reserved"),
    )
)
#: IPv6 ranges inside global unicast 2000::/3 that are not the public Internet (everything
#: outside 2000::/3 — loopback, unspecified, unique-local, link-local, site-local, multicast,
#: discard-only, unassigned — is refused by the 2000::/3 rule, with the names below for clarity).
_BLOCKED_V6: Final[tuple[tuple[Network, str], ...]] = tuple(
    (_net(cidr), kind)
    for cidr, kind in (
        ("::/128", "unspecified"),
        ("::1/128", "loopback"),
        ("fc00::/7", "unique-local"),
        ("fe80::/10", "link-local"),
        ("fec0::/10", "site-local"),
        ("ff00::/8", "multicast"),
        ("100::/64", "discard-only"),
        ("64:ff9b:1::/48", "local-use NAT64"),
        ("2001::/23", "IETF protocol assignment (Teredo, benchmarking, ORCHID, ...)"),
        ("2001:db8::/32", "documentation"),
        ("3fff::/20", "documentation"),
    )
)
_GLOBAL_UNICAST: Final = ipaddress.IPv6Network("2000::/3")
#: IPv6 ranges whose low 32 bits are an IPv4 address the packet ends up at.
_EMBEDDING_LOW32: Final = (
    (ipaddress.IPv6Network("::ffff:0:0/96"), "IPv4-mapped"),
    (ipaddress.IPv6Network("::ffff:0:0:0/96"), "IPv4-translated"),
    (ipaddress.IPv6Network("64:ff9b::/96"), "NAT64"),
    (ipaddress.IPv6Network("::/96"), "IPv4-compatible"),
)
_SIX_TO_FOUR: Final = ipaddress.IPv6Network("2002::/16")


@attrs.frozen
class DestinationPolicy:
    """What the guard lets through: allowed CIDRs and whether plain http is acceptable."""

    #: Addresses inside these networks pass even when their range is blocked.
    allow: tuple[Network, ...] = ()
    #: Refuse ``http://`` URLs (production); tests and the demo turn it off.
    require_https: bool = True

    @classmethod
    def of(cls, allow: Iterable[str] = (), *, require_https: bool = True) -> DestinationPolicy:
        """Read ``allow`` as CIDR strings (``"127.0.0.0/8"``, ``"fd00::/8"``, ``"10.1.2.3"``)."""
        if isinstance(allow, str):
            raise ConfigurationError(
                "allowed destinations must be a list of CIDR strings, not one string"
            )
        networks = []
        for text in allow:
            try:
                networks.append(ipaddress.ip_network(str(text).strip(), strict=True))
            except ValueError as exc:
                raise ConfigurationError(
                    f"allowed destination {str(text)[:80]!r} is not a CIDR network "
                    f"(e.g. 10.0.0.0/8 or fd00::/8): {exc}"
                ) from None
        return cls(tuple(networks), require_https=require_https)


@attrs.frozen
class Destination:
    """A webhook URL's scheme, host and port, as checked."""

    scheme: str
    #: A lower-case DNS name, or the canonical text of an IP literal (without brackets).
    host: str
    port: int
    #: The literal's address when the host is one (in whatever spelling it was written).
    address: Address | None

    @property
    def origin(self) -> str:
        """``scheme://host:port``: safe to show (no path, no query)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"


def _refuse(reason: str) -> BlockedDestination:
    return BlockedDestination(f"webhook URL refused: {reason}")


def parse_destination(url: str, *, require_https: bool = True) -> Destination:
    """Check a webhook URL's form and read its destination; raise BlockedDestination if refused.

    Only the form is judged here: a literal address is not yet checked against the blocked
    ranges (:func:`check_address` does that), and a DNS name is never resolved.
    """
    if not isinstance(url, str):
        raise _refuse(f"a URL must be text, got {type(url).__name__}")
    if len(url) > MAX_URL_LENGTH:
        raise _refuse(f"longer than {MAX_URL_LENGTH} characters")
    if _URL_CHARS.fullmatch(url) is None:
        raise _refuse(
            "it contains whitespace, a control character, a backslash or a non-ASCII character "
            "(percent-encode the path and query; write IDN host names in their xn-- form)"
        )
    scheme_match = _SCHEME.match(url)
    scheme = scheme_match.group(1).lower() if scheme_match else ""
    if scheme not in _DEFAULT_PORTS:
        raise _refuse(f"the scheme must be http or https, not {scheme[:20]!r}")
    if scheme == "http" and require_https:
        raise _refuse(
            "https is required (plain http only with --allow-http, the lane's allow_http: tests"
            " and internal receivers)"
        )
    rest = url[len(scheme) + 1 :]
    if not rest.startswith("//"):
        raise _refuse("no '//' after the scheme: the URL has no host")
    authority = re.split(r"[/?#]", rest[2:], maxsplit=1)[0]
    if "@" in authority:
        raise _refuse(
            "user information ('user@' or 'user:password@') before the host is not allowed"
        )
    host_text, port = _split_port(authority, _DEFAULT_PORTS[scheme])
    host, address = _read_host(host_text)
    return Destination(scheme=scheme, host=host, port=port, address=address)


def _split_port(authority: str, default: int) -> tuple[str, int]:
    if authority.startswith("["):
        end = authority.find("]")
        if end < 0:
            raise _refuse("an IPv6 literal's '[' is never closed")
        host, after = authority[: end + 1], authority[end + 1 :]
        if after and not after.startswith(":"):
            raise _refuse("unexpected text after the IPv6 literal")
        port_text = after[1:] if after else None
    else:
        host, colon, port_text_raw = authority.partition(":")
        port_text = port_text_raw if colon else None
    if port_text is None:
        return host, default
    if not port_text.isascii() or not port_text.isdigit() or len(port_text) > 5:
        raise _refuse(f"the port {port_text[:12]!r} is not a number of 1 to 65535")
    port = int(port_text)
    if not 1 <= port <= 65535:
        raise _refuse(f"the port {port} is not between 1 and 65535")
    return host, port


def _read_host(text: str) -> tuple[str, Address | None]:
    if not text:
        raise _refuse("the URL has no host")
    if text.startswith("["):
        inner = text[1:-1]
        if "%" in inner:
            raise _refuse("an IPv6 zone id ('%') is not allowed in a webhook URL")
        try:
            v6 = ipaddress.IPv6Address(inner)
        except ValueError:
            raise _refuse(f"[{inner[:60]}] is not an IPv6 address") from None
        return str(v6), v6
    if "%" in text:
        raise _refuse("a percent-encoded host is not allowed")
    v4 = literal_address(text)
    if v4 is not None:
        return str(v4), v4
    name = text.lower()
    labels = name.removesuffix(".").split(".")
    if _NUMERIC_LABEL.fullmatch(labels[-1]):
        raise _refuse(
            f"the host {text[:80]!r} ends in a number but is not an IPv4 address "
            "(no DNS name ends in a numeric label)"
        )
    if len(name) > _MAX_HOST or not all(_LABEL.fullmatch(label) for label in labels):
        raise _refuse(f"the host {text[:80]!r} is not a valid DNS name")
    return name, None


def literal_address(host: str) -> ipaddress.IPv4Address | None:
    """The IPv4 address ``host`` spells in any form ``inet_aton`` (and so ``getaddrinfo``) reads.

    One to four dot-separated parts, each decimal, octal (leading ``0``) or hex (``0x``); the last
    part fills the remaining bytes (``127.1`` is 127.0.0.1, ``2130706433`` is 127.0.0.1). One
    trailing dot is ignored, as URL parsers do. None when ``host`` is not such a literal.
    """
    parts = host.removesuffix(".").split(".")
    if not 1 <= len(parts) <= 4:
        return None
    numbers = [_ipv4_part(part) for part in parts]
    if any(number is None for number in numbers):
        return None
    values = [number for number in numbers if number is not None]
    *head, last = values
    if any(value > 255 for value in head) or last >= 256 ** (5 - len(values)):
        return None
    total = last
    for index, value in enumerate(head):
        total += value << (8 * (3 - index))
    return ipaddress.IPv4Address(total)


def _ipv4_part(part: str) -> int | None:
    if part[:2] in ("0x", "0X"):
        digits, base = part[2:], 16
        if re.fullmatch(r"[0-9A-Fa-f]+", digits) is None:
            return None
    elif part.startswith("0") and len(part) > 1:
        digits, base = part[1:], 8
        if re.fullmatch(r"[0-7]+", digits) is None:
            return None
    else:
        digits, base = part, 10
        if re.fullmatch(r"[0-9]+", digits) is None:
            return None
    if len(digits) > 12:  # far past 2**32 in any base; keeps int() cheap
        return None
    return int(digits, base)


def embedded_ipv4(address: Address) -> tuple[ipaddress.IPv4Address, str] | None:
    """The IPv4 address an IPv6 address carries (and the kind of embedding), if any."""
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address in _SIX_TO_FOUR:
        return ipaddress.IPv4Address((int(address) >> 80) & 0xFFFFFFFF), "6to4"
    for network, kind in _EMBEDDING_LOW32:
        # ::/96 holds :: and ::1 too; those are the IPv6 unspecified and loopback addresses.
        if address in network and int(address) > 1:
            return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF), kind
    return None


def _allowed(address: Address, allow: Sequence[Network]) -> bool:
    return any(address.version == net.version and address in net for net in allow)


def judge(address: Address, allow: Sequence[Network] = ()) -> str | None:
    """None if ``address`` may be contacted; otherwise why not (names the address)."""
    embedded = embedded_ipv4(address)
    judged: Address = address if embedded is None else embedded[0]
    if _allowed(address, allow) or _allowed(judged, allow):
        return None
    spelled = "" if embedded is None else f" ({embedded[1]} spelling {address})"
    if isinstance(judged, ipaddress.IPv4Address):
        table = _BLOCKED_V4
    else:
        table = _BLOCKED_V6
        if judged not in _GLOBAL_UNICAST and not any(judged in net for net, _ in table):
            return f"reserved address {judged} (outside IPv6 global unicast 2000::/3)"
    for network, kind in table:
        if judged in network:
            return f"{kind} address {judged} (in {network}){spelled}"
    return None


def check_address(address: Address, policy: DestinationPolicy, *, host: str) -> None:
    """Raise BlockedDestination unless ``address`` (what ``host`` is or resolved to) may be used."""
    problem = judge(address, policy.allow)
    if problem is not None:
        raise BlockedDestination(
            f"webhook destination {host[:100]} is not allowed: {problem}{_HINT}"
        )


def check_url(url: str, policy: DestinationPolicy) -> Destination:
    """:func:`parse_destination` under ``policy``, and a literal host's address judged too.

    A DNS name passes here; the adapter judges what it resolves to, at registration and at every
    connect.
    """
    destination = parse_destination(url, require_https=policy.require_https)
    if destination.address is not None:
        check_address(destination.address, policy, host=destination.host)
    return destination
