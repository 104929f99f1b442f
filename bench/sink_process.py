"""A STARTTLS SMTP sink (:class:`~outbox_adapters.demo.sink.SmtpSink`) in a process of its own.

The sink must not share the client's event loop or GIL, or the comparison would measure the two
fighting over one core (PERFORMANCE.md measured with the sink in its own process). The parent
talks to it over a pipe: ``count`` (messages received so far), ``stop``. Every wait has a
timeout; the child also stops by itself when its parent is gone or after ``max_life`` seconds.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import ssl
import time
from multiprocessing.connection import Connection
from types import TracebackType
from typing import Any, Self

__all__ = ["SinkProcess"]

_READY_TIMEOUT = 30.0
_REPLY_TIMEOUT = 10.0


def _serve(pipe: Connection, max_life: float) -> None:
    from outbox_adapters.demo.sink import SmtpSink  # noqa: PLC0415 - imported in the child only

    for name in ("mail.log", "mail.debug", "asyncio"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    parent = os.getppid()
    deadline = time.monotonic() + max_life
    with SmtpSink(tls="starttls") as sink:
        pipe.send({"port": sink.port, "ca_pem": sink.ca_file.read_text()})
        while time.monotonic() < deadline and os.getppid() == parent:
            if not pipe.poll(0.5):
                continue
            try:
                command = pipe.recv()
            except EOFError:
                break
            if command == "count":
                pipe.send(len(sink.received))
            elif command == "stop":
                break


class SinkProcess:
    """``with SinkProcess() as sink:`` → ``sink.port``, ``sink.client_context()``, ``sink.count()``."""

    def __init__(self, *, max_life: float = 3_600.0) -> None:
        self._max_life = max_life
        self._pipe: Connection | None = None
        self._process: Any = None
        self.port = 0
        self._ca_pem = ""

    def start(self) -> Self:
        context = multiprocessing.get_context("spawn")
        parent, child = context.Pipe()
        self._process = context.Process(
            target=_serve, args=(child, self._max_life), name="bench-smtp-sink", daemon=True
        )
        self._process.start()
        child.close()
        self._pipe = parent
        if not parent.poll(_READY_TIMEOUT):
            self.stop()
            raise TimeoutError(f"the SMTP sink process did not start within {_READY_TIMEOUT}s")
        ready = parent.recv()
        self.port = int(ready["port"])
        self._ca_pem = str(ready["ca_pem"])
        return self

    def client_context(self) -> ssl.SSLContext:
        """Trusts the sink's throwaway CA, and nothing else; hostname checked."""
        return ssl.create_default_context(cadata=self._ca_pem)

    def count(self) -> int:
        """Messages the sink has accepted so far."""
        if self._pipe is None:
            raise RuntimeError("the SMTP sink process is not running")
        self._pipe.send("count")
        if not self._pipe.poll(_REPLY_TIMEOUT):
            raise TimeoutError(f"the SMTP sink did not answer within {_REPLY_TIMEOUT}s")
        return int(self._pipe.recv())

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
