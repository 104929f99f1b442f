"""A TCP proxy whose behaviour a test switches at run time: the network faults of RELIABILITY.md.

Theory of operation
-------------------
:class:`FaultProxy` listens on ``127.0.0.1:0`` and forwards every accepted connection to one target.
Each connection is two pumps (client → server "upstream", server → client "downstream"). The mode,
which a test changes at any moment with :meth:`FaultProxy.set_mode` (or the short helpers), decides
what the pumps do:

``pass``   forward everything.
``stall``  a *silent* partition: nothing is forwarded and nothing is closed. Bytes already read are
           held, not dropped (TCP never loses bytes, it retransmits), so when the mode goes back to
           ``pass`` the held bytes flow on and the partition heals as a real one does. A connection
           accepted while stalled is not connected upstream until the stall ends (a SYN that gets no
           answer). ``stall(Direction.DOWNSTREAM)`` holds only the replies: the request reaches the
           server, the client never hears back.
``drop``   close every connection (FIN) and every new one at once.
``reset``  abort every connection with an RST (``SO_LINGER`` 0) and every new one at once.
``slow``   forward at most ``bytes_per_second`` in each direction of each connection.

:meth:`FaultProxy.when_sent` arms a one-shot trigger on the upstream byte stream: when the client
sends bytes containing a marker (e.g. a statement's text), a callback runs right after those bytes
were forwarded. That is how a test stalls a reply *after* the server has the request (the claim
committed on the server, its reply lost in the partition) without racing the client.

Only loopback: the proxy binds 127.0.0.1 and a test points it at a server on this machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import socket
import struct
from collections.abc import Callable
from typing import Self

__all__ = ["Direction", "FaultProxy", "Mode"]

_CHUNK = 65536


class Mode(enum.Enum):
    PASS = "pass"
    STALL = "stall"
    DROP = "drop"
    RESET = "reset"
    SLOW = "slow"


class Direction(enum.Flag):
    UPSTREAM = enum.auto()  # client → server
    DOWNSTREAM = enum.auto()  # server → client
    BOTH = UPSTREAM | DOWNSTREAM


def _rst(writer: asyncio.StreamWriter) -> None:
    """Abort with an RST rather than a FIN: linger on, timeout 0, then close."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class _Trigger:
    def __init__(self, marker: bytes, action: Callable[[], None]) -> None:
        self.marker = marker
        self.action = action
        self.fired = asyncio.Event()


class _Link:
    """One proxied connection: the client's stream, the server's stream, two pumps."""

    def __init__(self, client: tuple[asyncio.StreamReader, asyncio.StreamWriter]) -> None:
        self.client_reader, self.client_writer = client
        self.server_writer: asyncio.StreamWriter | None = None
        self.tasks: list[asyncio.Task[None]] = []
        self._closed = False

    def closed(self) -> bool:
        # A method, not an attribute: another task closes the link while this one awaits.
        return self._closed

    def close(self, *, reset: bool) -> None:
        if self._closed:
            return
        self._closed = True
        for writer in (self.client_writer, self.server_writer):
            if writer is None:
                continue
            if reset:
                _rst(writer)
            else:
                writer.close()
        for task in self.tasks:
            if task is not asyncio.current_task():
                task.cancel()


class FaultProxy:
    """A loopback TCP proxy to ``target_host:target_port``. ``async with FaultProxy(...) as p``."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.host = "127.0.0.1"
        self.port = 0
        self.mode = Mode.PASS
        self.stalled = Direction(0)
        self.bytes_per_second = 0.0
        #: Connections accepted so far, and bytes forwarded in each direction.
        self.accepted = 0
        self.forwarded = {Direction.UPSTREAM: 0, Direction.DOWNSTREAM: 0}
        self._server: asyncio.Server | None = None
        self._links: set[_Link] = set()
        self._flowing: dict[Direction, asyncio.Event] = {}
        self._triggers: list[_Trigger] = []
        self.closing = False

    # --- life cycle -------------------------------------------------------------------------------

    async def start(self) -> Self:
        self._flowing = {Direction.UPSTREAM: asyncio.Event(), Direction.DOWNSTREAM: asyncio.Event()}
        self._apply_stall()
        self._server = await asyncio.start_server(self._accept, self.host, 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        self.closing = True
        for event in self._flowing.values():
            event.set()  # wake connections held by a stall, so they end instead of lingering
        for link in list(self._links):
            link.close(reset=False)
        tasks = [task for link in self._links for task in link.tasks]
        await asyncio.gather(*tasks, return_exceptions=True)
        self._links.clear()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    @property
    def connections(self) -> int:
        """Connections open right now."""
        return sum(not link.closed() for link in self._links)

    # --- the switch -------------------------------------------------------------------------------

    def set_mode(
        self,
        mode: Mode,
        *,
        direction: Direction = Direction.BOTH,
        bytes_per_second: float = 0.0,
    ) -> None:
        """Switch behaviour now; ``direction`` matters to ``stall``, ``bytes_per_second`` to ``slow``."""
        if mode is Mode.SLOW and bytes_per_second <= 0:
            raise ValueError(f"slow mode needs a positive rate, got {bytes_per_second!r}")
        self.mode = mode
        self.bytes_per_second = bytes_per_second
        self.stalled = direction if mode is Mode.STALL else Direction(0)
        self._apply_stall()
        if mode in {Mode.DROP, Mode.RESET}:
            for link in list(self._links):
                link.close(reset=mode is Mode.RESET)

    def pass_through(self) -> None:
        self.set_mode(Mode.PASS)

    def stall(self, direction: Direction = Direction.BOTH) -> None:
        self.set_mode(Mode.STALL, direction=direction)

    def drop(self) -> None:
        self.set_mode(Mode.DROP)

    def reset(self) -> None:
        self.set_mode(Mode.RESET)

    def slow(self, bytes_per_second: float) -> None:
        self.set_mode(Mode.SLOW, bytes_per_second=bytes_per_second)

    def when_sent(self, marker: bytes, action: Callable[[], None]) -> asyncio.Event:
        """Run ``action`` once, right after upstream bytes containing ``marker`` were forwarded.

        Returns an event set when it has run. The marker is matched within one read, so pick one
        the client writes in a single piece (a statement's text is).
        """
        trigger = _Trigger(marker, action)
        self._triggers.append(trigger)
        return trigger.fired

    def _apply_stall(self) -> None:
        for direction, event in self._flowing.items():
            if direction & self.stalled:
                event.clear()
            else:
                event.set()

    # --- the pumps --------------------------------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        link = _Link((reader, writer))
        self._links.add(link)
        try:
            if self.mode in {Mode.DROP, Mode.RESET}:
                link.close(reset=self.mode is Mode.RESET)
                return
            # A partitioned network doesn't answer the SYN: connect upstream once it heals.
            await self._flowing[Direction.UPSTREAM].wait()
            if link.closed() or self.closing:
                return
            try:
                server_reader, link.server_writer = await asyncio.open_connection(*self.target)
            except OSError:
                link.close(reset=True)  # the target refused: the client sees a reset, as it would
                return
            if link.closed():  # dropped or reset while we were dialling
                link.server_writer.transport.abort()
                return
            link.tasks = [
                asyncio.create_task(
                    self._pump(link, reader, link.server_writer, Direction.UPSTREAM)
                ),
                asyncio.create_task(self._pump(link, server_reader, writer, Direction.DOWNSTREAM)),
            ]
            await asyncio.gather(*link.tasks, return_exceptions=True)
        finally:
            link.close(reset=False)
            self._links.discard(link)

    async def _pump(
        self,
        link: _Link,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        direction: Direction,
    ) -> None:
        flowing = self._flowing[direction]
        try:
            while not link.closed():
                await flowing.wait()
                data = await reader.read(_CHUNK)
                if not data:
                    break
                # Read while flowing, but the partition may have begun meanwhile: hold, don't drop.
                await flowing.wait()
                if link.closed():
                    break
                await self._forward(writer, data)
                self.forwarded[direction] += len(data)
                if direction is Direction.UPSTREAM:
                    self._fire(data)
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            # One side finished (or failed): end the other the same way a real peer would see it.
            link.close(reset=False)

    async def _forward(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        if self.mode is not Mode.SLOW:
            writer.write(data)
            await writer.drain()
            return
        # Slow: small pieces at the configured rate (re-read each time; the test may change it).
        view = memoryview(data)
        while view:
            rate = self.bytes_per_second if self.mode is Mode.SLOW else float(len(view))
            piece = max(1, min(len(view), int(rate / 20)))  # about 20 writes a second
            writer.write(bytes(view[:piece]))
            await writer.drain()
            view = view[piece:]
            if self.mode is Mode.SLOW:
                await asyncio.sleep(piece / rate)

    def _fire(self, data: bytes) -> None:
        for trigger in [t for t in self._triggers if t.marker in data]:
            self._triggers.remove(trigger)
            trigger.action()
            trigger.fired.set()
