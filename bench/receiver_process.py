"""A minimal HTTP/1.1 webhook receiver in a process of its own: every POST answered ``204``,
keep-alive, and counted.

Like :mod:`bench.sink_process`, it must not share the client's event loop or GIL, or the
comparison would measure the two fighting over one core. It does as little as a receiver can (no
signature check, no JSON parse): the figures are the client's cost, not the receiver's. The parent
talks to it over a pipe: ``count`` (requests answered so far), ``stop``. Every wait has a timeout;
the child also stops by itself when its parent is gone or after ``max_life`` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import multiprocessing
import os
import threading
import time
from multiprocessing.connection import Connection
from types import TracebackType
from typing import Any, Final, Self, cast

__all__ = ["ReceiverProcess"]

_READY_TIMEOUT: Final = 30.0
_REPLY_TIMEOUT: Final = 10.0
#: A request's head larger than this is refused (the connection closed): nothing legitimate here
#: comes close.
_MAX_HEAD: Final = 64 * 1024
_KEEP_ALIVE: Final = b"HTTP/1.1 204 No Content\r\nServer: bench-receiver\r\n\r\n"
_CLOSING: Final = b"HTTP/1.1 204 No Content\r\nServer: bench-receiver\r\nConnection: close\r\n\r\n"
_BAD: Final = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


class _Counter:
    """Requests answered and connections accepted (read from the pipe thread: ints, under the GIL)."""

    def __init__(self) -> None:
        self.requests = 0
        self.connections = 0


class _Http(asyncio.Protocol):
    """One connection: requests parsed from the buffer as they complete, answered in order."""

    def __init__(self, counter: _Counter) -> None:
        self._counter = counter
        self._buffer = bytearray()
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A TCP server's transport (uvloop's is not an asyncio.Transport subclass).
        self._transport = cast("asyncio.Transport", transport)
        self._counter.connections += 1

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        while self._transport is not None and self._one():
            pass

    def _one(self) -> bool:
        """Answer one complete request at the buffer's start; ``False`` when it is incomplete."""
        end = self._buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self._buffer) > _MAX_HEAD:
                self._refuse()
            return False
        length = 0
        close = False
        for line in bytes(self._buffer[:end]).split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            key = name.strip().lower()
            if key == b"content-length":
                length = int(value.strip() or b"0")
            elif key == b"transfer-encoding":
                self._refuse()  # the clients here always send a Content-Length
                return False
            elif key == b"connection" and value.strip().lower() == b"close":
                close = True
        total = end + 4 + length
        if len(self._buffer) < total:
            return False
        del self._buffer[:total]
        self._counter.requests += 1
        transport = self._transport
        assert transport is not None  # noqa: S101 - checked by the caller's loop
        if close:
            transport.write(_CLOSING)
            transport.close()
            self._transport = None
            return False
        transport.write(_KEEP_ALIVE)
        return True

    def _refuse(self) -> None:
        if self._transport is not None:
            self._transport.write(_BAD)
            self._transport.close()
            self._transport = None

    def connection_lost(self, exc: Exception | None) -> None:  # noqa: ARG002 - the protocol's
        self._transport = None


def _new_loop() -> asyncio.AbstractEventLoop:
    """uvloop's when installed (as :mod:`bench.loop`), else asyncio's."""
    try:
        uvloop = importlib.import_module("uvloop")
    except ImportError:
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


def _serve(pipe: Connection, max_life: float) -> None:
    counter = _Counter()
    loop = _new_loop()
    server = loop.run_until_complete(
        loop.create_server(lambda: _Http(counter), "127.0.0.1", 0, backlog=1024)
    )
    port = int(server.sockets[0].getsockname()[1])
    thread = threading.Thread(target=loop.run_forever, name="receiver-loop", daemon=True)
    thread.start()
    parent = os.getppid()
    deadline = time.monotonic() + max_life
    try:
        pipe.send({"port": port})
        while time.monotonic() < deadline and os.getppid() == parent:
            if not pipe.poll(0.5):
                continue
            try:
                command = pipe.recv()
            except EOFError:
                break
            if command == "count":
                pipe.send({"requests": counter.requests, "connections": counter.connections})
            elif command == "stop":
                break
    finally:
        loop.call_soon_threadsafe(server.close)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)


class ReceiverProcess:
    """``with ReceiverProcess() as receiver:`` → ``receiver.url``, ``receiver.count()``."""

    def __init__(self, *, max_life: float = 3_600.0) -> None:
        self._max_life = max_life
        self._pipe: Connection | None = None
        self._process: Any = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks"

    def start(self) -> Self:
        context = multiprocessing.get_context("spawn")
        parent, child = context.Pipe()
        self._process = context.Process(
            target=_serve, args=(child, self._max_life), name="bench-http-receiver", daemon=True
        )
        self._process.start()
        child.close()
        self._pipe = parent
        if not parent.poll(_READY_TIMEOUT):
            self.stop()
            raise TimeoutError(f"the HTTP receiver process did not start within {_READY_TIMEOUT}s")
        self.port = int(parent.recv()["port"])
        return self

    def counts(self) -> tuple[int, int]:
        """Requests answered and connections accepted so far."""
        if self._pipe is None:
            raise RuntimeError("the HTTP receiver process is not running")
        self._pipe.send("count")
        if not self._pipe.poll(_REPLY_TIMEOUT):
            raise TimeoutError(f"the HTTP receiver did not answer within {_REPLY_TIMEOUT}s")
        reply = self._pipe.recv()
        return int(reply["requests"]), int(reply["connections"])

    def count(self) -> int:
        """Requests answered so far."""
        return self.counts()[0]

    def stop(self) -> None:
        if self._pipe is not None:
            with contextlib.suppress(OSError, BrokenPipeError):
                self._pipe.send("stop")
            self._pipe.close()
            self._pipe = None
        if self._process is not None:
            self._process.join(10)
            if self._process.is_alive():
                self._process.terminate()
                self._process.join(5)
            if self._process.is_alive():
                self._process.kill()
                self._process.join(5)
            self._process = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
