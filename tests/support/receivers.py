"""Real local HTTP/1.1 webhook receivers, well-behaved and hostile, and a canary TCP listener.

Each runs a small asyncio server on 127.0.0.1, port 0, in a thread of its own (so it answers even
while the test's event loop is busy, and sync tests and subprocess workers can use it too)::

    with HttpReceiver() as hook:                              # 200 to everything
        await sender.send(hook.url("/in"), ...)
        [request] = hook.requests                             # method, path, headers, body

    with HttpReceiver(Reply.status(500), Reply.status(410)) as hook:   # a script: 500, then 410,
        ...                                                   # then `then=` (200) for the rest

    with CanaryListener() as canary:                          # counts accepted TCP connections
        ...
        assert canary.connections == 0

Replies (:class:`Reply`): ``ok()``, ``status(code, body=..., headers=...)``,
``rate_limited(retry_after)`` (429), ``redirect(location, code=302)``, ``hang_after_connect()``
(reads nothing, answers nothing), ``hang_after_headers()`` (status and headers, then silence),
``slow_drip(interval=0.5)`` (a 200 whose body comes a byte at a time), ``huge_body(size=50 MB)``
(a 200 advertising and streaming ``size`` bytes), ``reset()`` (reads the request, then RST).
``HttpReceiver(..., tls=server_context)`` speaks HTTPS (e.g. a ``trustme`` certificate).

Every request the receiver read is recorded (``requests``, each with ``at``: ``time.monotonic()``
when it was read), whatever the reply; ``connections`` counts accepted TCP connections.
Well-behaved replies keep the connection alive (HTTP/1.1). ``HttpReceiver(..., hold=0.2)`` holds
every reply that long after reading the request (a receiver that takes a moment to answer).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import struct
import threading
import time
from collections.abc import Coroutine
from typing import Any, Self

import attrs

__all__ = ["CanaryListener", "HttpReceiver", "ReceivedRequest", "Reply"]

_REASONS = {200: "OK", 204: "No Content", 302: "Found", 410: "Gone", 429: "Too Many Requests"}
_MAX_HEAD = 64 * 1024


@attrs.frozen
class ReceivedRequest:
    method: str
    path: str
    #: Header names lower-cased; a repeated header keeps its last value.
    headers: dict[str, str]
    body: bytes
    #: ``time.monotonic()`` when the request had been read (one clock for every process).
    at: float = 0.0


@attrs.frozen
class Reply:
    """What the receiver does with one request. Build it with the named constructors."""

    kind: str
    code: int = 200
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()
    interval: float = 0.5
    size: int = 0

    @classmethod
    def ok(cls, body: bytes = b'{"ok":true}') -> Reply:
        return cls("status", 200, body)

    @classmethod
    def status(
        cls, code: int, body: bytes = b"", headers: tuple[tuple[str, str], ...] = ()
    ) -> Reply:
        return cls("status", code, body or f"status {code}".encode(), headers)

    @classmethod
    def rate_limited(cls, retry_after: str = "7") -> Reply:
        return cls.status(429, headers=(("Retry-After", retry_after),))

    @classmethod
    def redirect(cls, location: str, code: int = 302) -> Reply:
        return cls.status(code, headers=(("Location", location),))

    @classmethod
    def hang_after_connect(cls) -> Reply:
        return cls("hang_after_connect")

    @classmethod
    def hang_after_headers(cls) -> Reply:
        return cls("hang_after_headers")

    @classmethod
    def slow_drip(cls, interval: float = 0.5, size: int = 1000) -> Reply:
        return cls("slow_drip", interval=interval, size=size)

    @classmethod
    def huge_body(cls, size: int = 50 * 1024 * 1024) -> Reply:
        return cls("huge_body", size=size)

    @classmethod
    def reset(cls) -> Reply:
        return cls("reset")


class _ThreadedServer:
    """An asyncio server in a thread of its own: start() / stop(), or ``with``."""

    host = "127.0.0.1"

    def __init__(self, *, tls: ssl.SSLContext | None = None) -> None:
        #: A server-side SSL context: the receiver then speaks HTTPS.
        self.tls = tls
        self.port = 0
        self.connections = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._lock = threading.Lock()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with self._lock:
            self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._handle(reader, writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            self._tasks.discard(task)
            writer.transport.abort()

    def _call(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=10)

    def start(self) -> Self:
        self._thread.start()

        async def serve() -> asyncio.Server:
            return await asyncio.start_server(self._accepted, self.host, 0, ssl=self.tls)

        self._server = self._call(serve())
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.sleep(0)

        with contextlib.suppress(Exception):
            self._call(close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()


class CanaryListener(_ThreadedServer):
    """A TCP listener that accepts, counts and closes connections (``connections``)."""

    def url(self, path: str = "/") -> str:
        return f"http://{self.host}:{self.port}{path}"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        del reader, writer


class HttpReceiver(_ThreadedServer):
    """An HTTP/1.1 receiver answering with a script of :class:`Reply` values, then ``then``."""

    def __init__(
        self,
        *script: Reply,
        then: Reply | None = None,
        tls: ssl.SSLContext | None = None,
        hold: float = 0.0,
    ) -> None:
        super().__init__(tls=tls)
        self._script = list(script)
        self.then = Reply.ok() if then is None else then
        #: Seconds every reply waits after its request was read.
        self.hold = hold
        self.requests: list[ReceivedRequest] = []

    def url(self, path: str = "/hook", *, host: str | None = None) -> str:
        """The receiver's URL (``host``: a name a test resolver maps to 127.0.0.1)."""
        scheme = "https" if self.tls else "http"
        return f"{scheme}://{host or self.host}:{self.port}{path}"

    def answer(self, *script: Reply, then: Reply | None = None) -> None:
        """Replace the script (thread-safe enough for tests: takes effect on the next request)."""
        with self._lock:
            self._script = list(script)
            if then is not None:
                self.then = then

    def snapshot(self) -> list[ReceivedRequest]:
        """The requests read so far (a copy, safe to read while the receiver runs)."""
        with self._lock:
            return list(self.requests)

    def wait_requests(self, count: int, *, timeout: float = 10.0) -> list[ReceivedRequest]:
        deadline = time.monotonic() + timeout
        while len(self.requests) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"{len(self.requests)} requests arrived, not {count}")
            time.sleep(0.01)
        return list(self.requests)

    def _next(self) -> Reply:
        with self._lock:
            return self._script.pop(0) if self._script else self.then

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            reply = self._next()
            if reply.kind == "hang_after_connect":
                await asyncio.Event().wait()  # read nothing, answer nothing
            request = await _read_request(reader)
            if request is None:
                return
            with self._lock:
                self.requests.append(attrs.evolve(request, at=time.monotonic()))
            if self.hold:
                await asyncio.sleep(self.hold)
            if not await self._reply(reply, writer):
                return

    async def _reply(self, reply: Reply, writer: asyncio.StreamWriter) -> bool:
        """Answer; True if the connection stays open for another request."""
        if reply.kind == "status":
            head = _head(reply.code, len(reply.body), reply.headers)
            writer.write(head + reply.body)
            await writer.drain()
            return True
        if reply.kind == "reset":
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
            return False
        if reply.kind == "hang_after_headers":
            writer.write(_head(200, 100))
            await writer.drain()
            await asyncio.Event().wait()
        if reply.kind == "slow_drip":
            writer.write(_head(200, reply.size))
            for _ in range(reply.size):
                await writer.drain()
                await asyncio.sleep(reply.interval)
                writer.write(b"x")
        if reply.kind == "huge_body":
            writer.write(_head(200, reply.size))
            chunk = b"x" * 65536
            for _ in range(reply.size // len(chunk)):
                writer.write(chunk)
                await writer.drain()
        return False


def _head(code: int, length: int, headers: tuple[tuple[str, str], ...] = ()) -> bytes:
    lines = [f"HTTP/1.1 {code} {_REASONS.get(code, 'Status')}", f"Content-Length: {length}"]
    lines += [f"{name}: {value}" for name, value in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def _read_request(reader: asyncio.StreamReader) -> ReceivedRequest | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None  # the client closed the connection between requests
    except asyncio.LimitOverrunError:
        return None
    if len(head) > _MAX_HEAD:
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, path, _version = lines[0].split(" ", 2)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0") or "0")
    body = await reader.readexactly(length) if length else b""
    return ReceivedRequest(method, path, headers, body)
