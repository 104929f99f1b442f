"""The webhook sender (ADR 0016): :class:`HttpxWebhookSender`, one keep-alive client per sender."""

from __future__ import annotations

import asyncio
import ssl
import unicodedata
from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import Any, Final, Self
from urllib.parse import urlsplit

import attrs
import httpcore
import httpx

from outbox_adapters.clock import SystemClock
from outbox_adapters.http.errors import (
    ResponseTooLarge,
    end_attempt,
    failure_outcome,
    start_attempt,
)
from outbox_adapters.http.guard import DestinationGuard
from outbox_core.classify import HttpAttempt, classify_http
from outbox_core.errors import ConfigurationError
from outbox_core.outcomes import Outcome
from outbox_core.ports import Clock
from outbox_core.signing import HEADER_SIGNATURE

__all__ = [
    "DEFAULT_MAX_PER_ORIGIN",
    "PROBE_HOST",
    "HttpTimeouts",
    "HttpxWebhookSender",
    "PinnedTransport",
    "PinningLost",
    "response_snippet",
]

#: The longest response snippet kept with a delivery (characters).
SNIPPET_CHARS: Final = 512
#: Requests one sender has in flight to one origin (scheme, host, port) at the most.
DEFAULT_MAX_PER_ORIGIN: Final = 8
REDACTED: Final = "[redacted]"
_UNSAFE_CATEGORIES: Final = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def _positive(_inst: object, attribute: Any, value: float) -> None:  # noqa: ANN401
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigurationError(
            f"HTTP timeout {attribute.name} must be positive seconds: {value!r}"
        )


@attrs.frozen
class HttpTimeouts:
    """httpx's per-operation timeouts (seconds). The attempt's ``budget`` bounds them all, and
    the whole attempt (a slow drip resets a read timeout at every byte, so it is not enough)."""

    connect: float = attrs.field(default=5.0, validator=_positive)
    read: float = attrs.field(default=8.0, validator=_positive)
    write: float = attrs.field(default=8.0, validator=_positive)
    pool: float = attrs.field(default=5.0, validator=_positive)

    def within(self, budget: float) -> httpx.Timeout:
        return httpx.Timeout(
            connect=min(self.connect, budget),
            read=min(self.read, budget),
            write=min(self.write, budget),
            pool=min(self.pool, budget),
        )


#: The host of the self-check request (``.invalid`` never resolves: RFC 6761).
PROBE_HOST: Final = "pinning-probe.outbox.invalid"


class PinningLost(ConfigurationError):
    """The sender's connections would not go through the destination guard: it refuses to send."""


class _ProbeReached(Exception):
    """The self-check request reached the guard's backend (pinning is in effect)."""


class _CheckedBackend(httpcore.AsyncNetworkBackend):
    """The pool's network backend: the guard's, except that a connect to :data:`PROBE_HOST`
    stops at once with :class:`_ProbeReached` (nothing is resolved or opened)."""

    def __init__(self, inner: httpcore.AsyncNetworkBackend) -> None:
        self.inner = inner

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's signature
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        if host == PROBE_HOST:
            raise _ProbeReached
        return await self.inner.connect_tcp(
            host,
            port,
            timeout=timeout,
            local_address=local_address,
            socket_options=socket_options,
        )

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's signature
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        return await self.inner.connect_unix_socket(
            path, timeout=timeout, socket_options=socket_options
        )

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


class PinnedTransport(httpx.AsyncHTTPTransport):
    """httpx's HTTP transport whose connection pool connects only through the guard.

    httpx does not take an httpcore network backend as an argument, so the pool it builds (its
    private ``_pool``) is replaced by one built the same way with the guard's
    :class:`~outbox_adapters.http.guard.PinnedBackend`; every connection that pool ever opens
    (keep-alive ones included) goes through that backend. Because this leans on an httpx
    internal, it is checked twice (docs/adr/0016-webhook-sender-and-destination-guard.md):
    construction refuses (:class:`PinningLost`) unless httpx built a ``_pool`` that is an
    httpcore ``AsyncConnectionPool``, and :meth:`verify` sends a request for
    :data:`PROBE_HOST` through the transport and refuses unless it reached the guard's
    backend. The sender runs :meth:`verify` before a new transport's first request.
    """

    def __init__(
        self, guard: DestinationGuard, *, ssl_context: ssl.SSLContext, limits: httpx.Limits
    ) -> None:
        super().__init__(verify=ssl_context, trust_env=False, limits=limits, retries=0)
        if not isinstance(vars(self).get("_pool"), httpcore.AsyncConnectionPool):
            raise PinningLost(
                f"httpx {httpx.__version__} does not keep its connection pool where this"
                " sender replaces it (AsyncHTTPTransport._pool): its connections would not be"
                " pinned by the destination guard; refusing to send (install httpx <1.0 as"
                " pyproject.toml's webhooks extra requires)"
            )
        self.backend = guard.network_backend()
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            http1=True,
            http2=False,
            retries=0,
            network_backend=_CheckedBackend(self.backend),
        )

    async def verify(self) -> None:
        """Send one request for :data:`PROBE_HOST` through this transport; raise
        :class:`PinningLost` unless its connect reached the guard's backend (which stops it
        before anything is resolved or opened)."""
        request = httpx.Request("POST", f"http://{PROBE_HOST}/")
        try:
            response = await self.handle_async_request(request)
        except _ProbeReached:
            return
        except Exception as exc:  # noqa: BLE001 - any other end: the guard was not reached
            detail = f"{type(exc).__name__}: {exc}"
        else:
            await response.aclose()
            detail = f"a {response.status_code} response"
        raise PinningLost(
            f"the webhook sender's self-check request got {detail[:200]} instead of reaching"
            f" the destination guard (httpx {httpx.__version__}, httpcore"
            f" {httpcore.__version__}): its connections would not be pinned; refusing to send"
        )


def response_snippet(body: bytes, request_headers: Mapping[str, str]) -> str | None:
    """At most 512 characters of ``body``: decoded leniently, control characters removed, and
    every value of the request's ``webhook-signature`` header (and each signature in it)
    replaced by ``[redacted]``. None for an empty body."""
    if not body:
        return None
    text = "".join(
        char
        for char in body.decode("utf-8", errors="replace")
        if unicodedata.category(char) not in _UNSAFE_CATEGORIES or char == " "
    )
    secrets: set[str] = set()
    for name, value in request_headers.items():
        if name.lower() == HEADER_SIGNATURE and value:
            secrets.add(value)
            for entry in value.split():
                secrets.add(entry)
                secrets.add(entry.partition(",")[2])
    for secret in sorted(filter(None, secrets), key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return text[:SNIPPET_CHARS]


def _check_count(name: str, value: object, what: str) -> None:
    """Refuse a setting that is not a whole number of at least 1, naming it."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{name} must be {what}: {value!r}")


class HttpxWebhookSender:
    """:class:`outbox_core.ports.WebhookSender` on httpx, through a :class:`DestinationGuard`.

    One ``httpx.AsyncClient`` per sender (keep-alive pool; a sender moved to another event loop
    starts a fresh client there): ``trust_env=False`` (no proxy or netrc from the environment),
    redirects never followed, explicit timeouts AND an absolute deadline of ``budget`` around
    the whole attempt (connect, request and the capped read of the response). Never raises for a
    delivery problem. Call :meth:`aclose` (or use ``async with``) when done.

    At most ``max_per_origin`` requests are in flight to one origin (scheme, host, port) at a time
    (a send cap per destination, ADR 0016); a request beyond it waits for a slot inside its
    own absolute deadline, and one that gets none in time was surely not sent (a transient
    failure, retried on the schedule). One slow receiver cannot hold every connection, and the
    connection pool stays small: httpcore's pool scans every connection for every request it
    assigns, so its CPU per request grows with the requests in flight (measured here against one
    local receiver: 0.7 ms a request at 1 or 2 in flight, 1.0 ms at 8, 1.4 ms at 16, 2.8 ms at
    32; docs/benchmarks.md).
    """

    def __init__(  # noqa: PLR0913 - keyword-only settings
        self,
        guard: DestinationGuard,
        *,
        response_cap: int = 64 * 1024,
        timeouts: HttpTimeouts | None = None,
        clock: Clock | None = None,
        ssl_context: ssl.SSLContext | None = None,
        max_connections: int = 100,
        max_per_origin: int = DEFAULT_MAX_PER_ORIGIN,
        user_agent: str = "leased-outbox-webhooks",
    ) -> None:
        if not isinstance(guard, DestinationGuard):
            raise ConfigurationError(
                f"HttpxWebhookSender needs a DestinationGuard, got {type(guard).__name__}"
            )
        _check_count("response_cap", response_cap, "a positive byte count")
        _check_count("max_connections", max_connections, "a positive count")
        _check_count("max_per_origin", max_per_origin, "a positive count of requests")
        self.guard = guard
        self.response_cap = response_cap
        self.max_per_origin = max_per_origin
        #: One slot count per origin, of the current client's loop (made again with the client).
        self._origins: dict[tuple[str, str, int | None], asyncio.Semaphore] = {}
        self.timeouts = HttpTimeouts() if timeouts is None else timeouts
        self._clock: Clock = SystemClock() if clock is None else clock
        self._ssl_context = ssl.create_default_context() if ssl_context is None else ssl_context
        self._limits = httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections
        )
        self._user_agent = user_agent
        self._client: httpx.AsyncClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # One client is built per loop at a time: concurrent first sends wait for it rather
        # than each building (and leaking) a client of their own.
        self._building: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None
        #: The transport of the current client (tests look at its backend's connection count).
        self.transport: PinnedTransport | None = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.aclose()

    async def _client_for(self, loop: asyncio.AbstractEventLoop) -> httpx.AsyncClient:
        """The client of ``loop``: the current one, or a new one whose transport passed its
        pinning self-check (:meth:`PinnedTransport.verify`; :class:`PinningLost` otherwise)."""
        if self._client is not None and self._loop is loop:
            return self._client
        if self._building is None or self._building[0] is not loop:
            self._building = (loop, asyncio.Lock())
        async with self._building[1]:
            if self._client is not None and self._loop is loop:
                return self._client  # built by a send that got here first
            # A client of another (finished) loop: its connections belong to that loop. Drop it.
            self._origins = {}
            transport = PinnedTransport(
                self.guard, ssl_context=self._ssl_context, limits=self._limits
            )
            await transport.verify()
            self.transport = transport
            self._client = httpx.AsyncClient(
                transport=self.transport,
                trust_env=False,
                follow_redirects=False,
                headers={"user-agent": self._user_agent, "accept-encoding": "identity"},
            )
            self._loop = loop
            return self._client

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None and self._loop is asyncio.get_running_loop():
            await client.aclose()

    async def send(
        self, url: str, *, headers: Mapping[str, str], body: bytes, budget: timedelta
    ) -> Outcome:
        # Before the attempt: a transport that fails its pinning self-check raises PinningLost
        # here (a configuration error, never a delivery outcome).
        client = await self._client_for(asyncio.get_running_loop())
        progress, token = start_attempt()
        status: int | None = None
        snippet: str | None = None
        try:
            self.guard.check_url(url)
            seconds = max(budget.total_seconds(), 0.0)
            async with asyncio.timeout(seconds), self._slot(url):
                status, retry_after, raw = await self._exchange(
                    client, url, headers, body, self.timeouts.within(seconds)
                )
            snippet = response_snippet(raw, headers)
            attempt = HttpAttempt.response(status, retry_after=retry_after)
            outcome = classify_http(attempt, now=self._clock.now())
        except Exception as exc:
            mapped = failure_outcome(exc, progress, now=self._clock.now())
            if mapped is None:
                raise  # not a delivery problem: a bug, let it be seen
            outcome = mapped
            status = exc.status if isinstance(exc, ResponseTooLarge) else None
        finally:
            end_attempt(token)
        return outcome.with_progress({"last_status": status, "response": snippet})

    def _slot(self, url: str) -> asyncio.Semaphore:
        """The slots of ``url``'s origin (the guard has checked the URL's form already)."""
        parts = urlsplit(url)
        origin = (parts.scheme.lower(), (parts.hostname or "").lower(), parts.port)
        slots = self._origins.get(origin)
        if slots is None:
            slots = self._origins[origin] = asyncio.Semaphore(self.max_per_origin)
        return slots

    async def _exchange(
        self,
        client: httpx.AsyncClient,
        url: str,
        headers: Mapping[str, str],
        body: bytes,
        limits: httpx.Timeout,
    ) -> tuple[int, str | None, bytes]:
        request = client.build_request(
            "POST",
            url,
            content=body,
            headers={"content-type": "application/json", **headers},
            timeout=limits,
        )
        response = await client.send(request, stream=True)
        try:
            status = response.status_code
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > self.response_cap:
                raise ResponseTooLarge(status, self.response_cap)
            raw = bytearray()
            async for chunk in response.aiter_raw():
                raw += chunk
                if len(raw) > self.response_cap:
                    raise ResponseTooLarge(status, self.response_cap)
            return status, response.headers.get("retry-after"), bytes(raw)
        finally:
            await response.aclose()
