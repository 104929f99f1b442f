"""The demo's webhook receivers: small real HTTP/1.1 servers on 127.0.0.1 (asyncio, no framework).

A :class:`Receiver` answers every POST by its :class:`Behaviour` and keeps what it received. The
``verifying`` one checks each request's Standard Webhooks signature with the endpoint's secrets,
as a receiver should (``outbox_core.signing.verify``), and answers 401 when it does not verify.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Sequence
from typing import Final, Self

import attrs

from outbox_core.errors import WebhookVerificationError
from outbox_core.signing import HEADER_ID, WebhookSecret, verify

__all__ = ["Behaviour", "Received", "Receiver"]

_MAX_HEAD: Final = 16 * 1024
_MAX_BODY: Final = 1024 * 1024
_REASONS: Final = {
    204: "No Content",
    401: "Unauthorized",
    410: "Gone",
    500: "Internal Server Error",
}


class Behaviour(enum.Enum):
    #: Verifies the signature; 204 when it holds, 401 when not.
    VERIFYING = "verifying"
    #: As VERIFYING, but 503 to the very first request: that delivery is retried.
    VERIFYING_AFTER_503 = "503 once, then verifying"
    #: 500 to the first request, then 410 Gone: the endpoint is retried once, then disabled.
    GONE_AFTER_ERROR = "500 then 410"


@attrs.frozen
class Received:
    msg_id: str
    status: int
    verified: bool


class Receiver:
    """One local HTTP receiver. ``async with Receiver(...) as r``; its URL is :attr:`url`."""

    def __init__(self, behaviour: Behaviour) -> None:
        self.behaviour = behaviour
        #: The secrets the verifying receiver checks against (set once the endpoint exists).
        self.secrets: Sequence[WebhookSecret] = ()
        self.received: list[Received] = []
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        assert self._server is not None  # noqa: S101 - only read while serving
        host, port = self._server.sockets[0].getsockname()[:2]
        return f"http://{host}:{port}/hooks"

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *_exc: object) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:  # keep-alive: the sender reuses its connection
                request = await _read_request(reader)
                if request is None:
                    return
                headers, body = request
                status = self._answer(headers, body)
                reason = _REASONS.get(status, "OK")
                writer.write(f"HTTP/1.1 {status} {reason}\r\ncontent-length: 0\r\n\r\n".encode())
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            return
        finally:
            writer.close()

    def _answer(self, headers: dict[str, str], body: bytes) -> int:
        msg_id = headers.get(HEADER_ID, "")
        if self.behaviour is Behaviour.GONE_AFTER_ERROR:
            status = 500 if not self.received else 410
            self.received.append(Received(msg_id, status, verified=False))
            return status
        if self.behaviour is Behaviour.VERIFYING_AFTER_503 and not self.received:
            self.received.append(Received(msg_id, 503, verified=False))
            return 503
        try:
            verify(headers, body, self.secrets, now=int(time.time()))
        except WebhookVerificationError:
            self.received.append(Received(msg_id, 401, verified=False))
            return 401
        self.received.append(Received(msg_id, 204, verified=True))
        return 204


async def _read_request(reader: asyncio.StreamReader) -> tuple[dict[str, str], bytes] | None:
    head = await reader.readuntil(b"\r\n\r\n")
    if not head.strip():
        return None
    if len(head) > _MAX_HEAD:
        raise ValueError("request head too large")
    lines = head.decode("latin-1").split("\r\n")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    if not 0 <= length <= _MAX_BODY:
        raise ValueError("request body too large")
    return headers, await reader.readexactly(length)
