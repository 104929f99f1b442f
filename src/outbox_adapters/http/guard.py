# ruff: noqa: ASYNC109 - httpcore's backend and stream interface takes `timeout` arguments
"""The outbound destination guard: resolve, check EVERY address, connect only to a checked one.

The rules are pure (``outbox_core.destinations``); this module does the I/O around them:

- :meth:`DestinationGuard.check_url` — the URL's form and, for a literal host, its address;
- :meth:`DestinationGuard.check_registration` — that, and the host name resolved now: every
  address it resolves to must pass (an endpoint that points at an internal address is refused
  when it is added, with a message that says why);
- :class:`PinnedBackend` — an httpcore network backend, installed in the sender's connection
  pool, whose ``connect_tcp`` is the ONLY way the pool opens a connection. For every new
  connection (keep-alive or not) it resolves the host once through the guard's resolver, checks
  every answer, and connects to a checked address by its numeric form. Nothing resolves the name
  a second time: httpx and httpcore hand the host to this backend, and the OS gets an IP literal.
  TLS (SNI and the certificate check) still runs against the host NAME, by httpcore, on the
  stream this backend returns.

A DNS answer that changes between registration and connect (DNS rebinding) is therefore judged
by the answer the connection actually uses.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

import httpcore

from outbox_adapters.http.errors import ResolutionFailed, Stage, current_progress
from outbox_core.destinations import (
    Address,
    Destination,
    DestinationPolicy,
    check_address,
    check_url,
    literal_address,
)
from outbox_core.errors import BlockedDestination

__all__ = ["DestinationGuard", "PinnedBackend", "Resolver", "system_resolver"]

#: ``await resolver(host, port)`` → the addresses (text) ``host`` resolves to.
Resolver = Callable[[str, int], Awaitable[Sequence[str]]]


async def system_resolver(host: str, port: int) -> list[str]:
    """The event loop's ``getaddrinfo`` (the system resolver), TCP answers only."""
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
    )
    return [str(info[4][0]) for info in infos]


def _address(text: str) -> Address:
    # getaddrinfo gives link-local IPv6 answers with a zone ("fe80::1%eth0"); the zone does not
    # change what the address is.
    return ipaddress.ip_address(text.partition("%")[0])


class DestinationGuard:
    """Checks webhook destinations, at registration and at every connect.

    ``allow``: CIDR strings whose addresses pass even when their range is blocked (a bad CIDR is a
    ``ConfigurationError``). ``require_https``: refuse ``http://`` (production). ``resolver``:
    ``await resolver(host, port)`` → address strings; the system resolver by default (tests inject
    one, e.g. one that answers differently on each call).
    """

    def __init__(
        self,
        *,
        allow: Iterable[str] = (),
        require_https: bool = True,
        resolver: Resolver | None = None,
    ) -> None:
        self.policy = DestinationPolicy.of(allow, require_https=require_https)
        self._resolver: Resolver = system_resolver if resolver is None else resolver

    def describe(self) -> str:
        """One line for a worker to print at start."""
        allowed = ", ".join(str(network) for network in self.policy.allow) or "none"
        scheme = "https only" if self.policy.require_https else "http and https"
        return (
            f"webhook destinations: {scheme}; loopback, private, link-local, CGNAT, multicast and"
            f" reserved addresses blocked, checked at every connect; allowed anyway: {allowed}"
        )

    def check_url(self, url: str) -> Destination:
        """The URL's form and a literal host's address; raises ``BlockedDestination`` naming why."""
        return check_url(url, self.policy)

    async def check_registration(self, url: str) -> None:
        """:meth:`check_url`, then every address the host resolves to now must pass too."""
        destination = self.check_url(url)
        try:
            await self.connect_addresses(destination.host, destination.port)
        except ResolutionFailed as exc:
            raise BlockedDestination(
                f"webhook destination {destination.host[:100]} cannot be checked: {exc}"
            ) from None

    async def connect_addresses(self, host: str, port: int) -> tuple[Address, ...]:
        """The addresses a connection to ``host`` may use: resolved once, EVERY one checked.

        A literal host (any spelling) is its own address and is never resolved. Raises
        ``BlockedDestination`` if any address is not allowed (one bad answer is enough: a
        resolver that mixes a public and an internal address is not trusted with either),
        ``ResolutionFailed`` if the name does not resolve to addresses.
        """
        literal = _literal(host)
        if literal is not None:
            check_address(literal, self.policy, host=host)
            return (literal,)
        try:
            answers = await self._resolver(host, port)
        except OSError as exc:
            raise ResolutionFailed(f"{host[:100]} did not resolve ({exc})") from None
        try:
            addresses = tuple(dict.fromkeys(_address(str(answer)) for answer in answers))
        except ValueError:
            raise ResolutionFailed(
                f"{host[:100]} resolved to something that is no address"
            ) from None
        if not addresses:
            raise ResolutionFailed(f"{host[:100]} resolved to no address")
        for address in addresses:
            check_address(address, self.policy, host=host)
        return addresses

    def network_backend(self) -> PinnedBackend:
        """The httpcore backend that makes every connection go through this guard."""
        return PinnedBackend(self)


def _literal(host: str) -> Address | None:
    if ":" in host:  # httpcore hands IPv6 literals over without their brackets
        try:
            return _address(host.strip("[]"))
        except ValueError:
            return None
    return literal_address(host)


class PinnedBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend, with every TCP connect pinned to a checked address."""

    def __init__(
        self, guard: DestinationGuard, inner: httpcore.AsyncNetworkBackend | None = None
    ) -> None:
        self.guard = guard
        self._inner = httpcore.AnyIOBackend() if inner is None else inner
        #: Connections this backend opened (each to a checked address).
        self.connections = 0

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        progress = current_progress()
        progress.stage = Stage.RESOLVE
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        try:
            async with asyncio.timeout_at(deadline):
                addresses = await self.guard.connect_addresses(host, port)
        except TimeoutError:
            raise ResolutionFailed(f"{host[:100]} did not resolve in time") from None
        progress.stage = Stage.CONNECT
        failure: Exception | None = None
        for address in addresses:
            left = None if deadline is None else max(deadline - loop.time(), 0.0)
            try:
                stream = await self._inner.connect_tcp(
                    str(address),  # numeric: nothing below resolves anything
                    port,
                    timeout=left,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except httpcore.ConnectError as exc:  # refused or unreachable: the next checked one
                failure = exc
                continue
            self.connections += 1
            progress.address = str(address)
            return PinnedStream(stream)
        assert failure is not None  # noqa: S101 - addresses is never empty
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        del path, timeout, socket_options
        raise BlockedDestination("a Unix socket is never a webhook destination")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class PinnedStream(httpcore.AsyncNetworkStream):
    """A connection's stream that tells the attempt's progress when the request starts leaving."""

    def __init__(self, inner: httpcore.AsyncNetworkStream) -> None:
        self._inner = inner

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        progress = current_progress()
        if progress.stage is Stage.SEND:
            progress.stage = Stage.RECEIVE
        return await self._inner.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        progress = current_progress()
        progress.stage = Stage.SEND
        # From here the peer may have seen bytes of the request (even if this write fails).
        progress.request_sent = True
        await self._inner.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(
        self,
        ssl_context: Any,  # noqa: ANN401 - httpcore's signature
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        current_progress().stage = Stage.TLS
        # server_hostname is the URL's host name: SNI and the certificate check use it, not the
        # pinned address.
        upgraded = await self._inner.start_tls(ssl_context, server_hostname, timeout)
        return PinnedStream(upgraded)

    def get_extra_info(self, info: str) -> Any:  # noqa: ANN401 - httpcore's signature
        return self._inner.get_extra_info(info)
