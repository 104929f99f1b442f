"""Per-client signup rate limit: fixed windows, in Redis when ``REDIS_URL`` is set, else in-process.

Who the client is: the right-most ``X-Forwarded-For`` hop, else the socket's peer. Every hop left
of the right-most one was written by whoever sent the request and can be anything; the right-most
one was appended by the proxy in front of us, which saw the real peer. (This assumes exactly one
proxy, as the reference deployment has; behind two, it would be the second from the right.)

Redis-backed, the limit holds across every replica (``INCR`` + ``EXPIRE`` on a key per client and
window). If Redis is unreachable the limiter lets the signup through and logs a warning: a rate
limiter that fails closed would turn a cache outage into a signup outage.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Final, Protocol

import attrs

__all__ = ["InProcessLimiter", "Limiter", "RedisLimiter", "Verdict", "client_of", "limiter_for"]

_log = logging.getLogger("examples.signup_service.ratelimit")
_MAX_CLIENT: Final = 64


def client_of(headers: Mapping[str, str], peer: str | None) -> str:
    """The client to count: the right-most ``X-Forwarded-For`` hop, else the peer's address."""
    forwarded = headers.get("x-forwarded-for", "")
    hops = [hop.strip() for hop in forwarded.split(",") if hop.strip()]
    if hops:
        return hops[-1][:_MAX_CLIENT]
    return peer or "unknown"


@attrs.frozen
class Verdict:
    allowed: bool
    #: Seconds until the window ends (the ``Retry-After`` of a refusal).
    retry_after: int


class Limiter(Protocol):
    async def hit(self, client: str) -> Verdict: ...

    async def aclose(self) -> None: ...


class InProcessLimiter:
    """One process's fixed windows (a single replica, or a local run)."""

    def __init__(self, limit: int, window: float) -> None:
        self.limit = limit
        self.window = window
        self._counts: dict[tuple[str, int], int] = {}

    async def hit(self, client: str) -> Verdict:
        now = time.time()
        slot = int(now // self.window)
        for key in [k for k in self._counts if k[1] < slot]:  # forget past windows
            del self._counts[key]
        count = self._counts.get((client, slot), 0) + 1
        self._counts[client, slot] = count
        retry = max(1, int((slot + 1) * self.window - now + 0.999))
        return Verdict(count <= self.limit, retry)

    async def aclose(self) -> None:
        return None


class RedisLimiter:
    """Fixed windows in Redis, shared by every replica."""

    def __init__(self, url: str, limit: int, window: float) -> None:
        import redis.asyncio as redis  # noqa: PLC0415 - only when REDIS_URL is set

        self.limit = limit
        self.window = window
        self._redis = redis.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5)
        self._errors = (redis.RedisError, OSError)

    async def hit(self, client: str) -> Verdict:
        now = time.time()
        slot = int(now // self.window)
        key = f"signup-rate:{client}:{slot}"
        retry = max(1, int((slot + 1) * self.window - now + 0.999))
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.incr(key)
                pipe.expire(key, int(self.window) + 1)
                count, _ = await pipe.execute()
        except self._errors as exc:
            _log.warning("rate limit: Redis unavailable (%s); signup allowed", exc)
            return Verdict(allowed=True, retry_after=retry)
        return Verdict(int(count) <= self.limit, retry)

    async def aclose(self) -> None:
        await self._redis.aclose()


def limiter_for(redis_url: str | None, limit: int, window: float) -> Limiter:
    if redis_url:
        return RedisLimiter(redis_url, limit, window)
    return InProcessLimiter(limit, window)
