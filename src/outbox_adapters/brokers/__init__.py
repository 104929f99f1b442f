"""Broker adapters (catalogue A7): NATS JetStream and Kafka behind the core's ``Publisher`` and
``Consumer`` ports, with explicit stream/topic declaration and a dead-letter queue to list and
redrive. ADR 0019 says what each broker guarantees.

=====================  ========================================================================
module                 holds
=====================  ========================================================================
:mod:`.nats`           :class:`NatsBroker` (nats-py, JetStream)
:mod:`.kafka`          :class:`KafkaBroker` (aiokafka): producer, declaration, DLQ
:mod:`.kafka_consumer` the Kafka consumer group (contiguous commits after acks, local retries)
:mod:`.errors`         the one mapping of nats-py / aiokafka exceptions; :class:`BrokerUnavailable`
=====================  ========================================================================

``connect_broker("nats://127.0.0.1:4222")`` or ``connect_broker("kafka://h1:9092,h2:9092")``
returns a :class:`~outbox_core.brokers.Broker`. It connects on first use: a relay may start while
the broker is down (its publishes are ``transient`` until the broker is back).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import timedelta
from urllib.parse import urlsplit

from outbox_adapters.brokers.errors import BrokerUnavailable
from outbox_adapters.brokers.kafka import KafkaBroker, KafkaPublisher
from outbox_adapters.brokers.kafka_consumer import KafkaConsumer
from outbox_adapters.brokers.nats import NatsBroker, NatsConsumer, NatsPublisher
from outbox_core.brokers import Broker, DeadLetter, StreamSpec, dlq_subject, park_message
from outbox_core.errors import ConfigurationError

__all__ = [
    "Broker",
    "BrokerUnavailable",
    "DeadLetter",
    "KafkaBroker",
    "KafkaConsumer",
    "KafkaPublisher",
    "NatsBroker",
    "NatsConsumer",
    "NatsPublisher",
    "StreamSpec",
    "broker_from_url",
    "connect_broker",
    "dlq_subject",
    "park_message",
    "parse_broker_url",
]

_HOST = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):([0-9]{1,5})")
_SCHEMES = ("nats", "kafka")


def _redacted(url: str) -> str:
    return re.sub(r"//[^@/]*@", "//***@", url)


def parse_broker_url(url: str) -> tuple[str, list[str]]:
    """``(scheme, ["host:port", ...])`` of ``nats://host:port[,host:port]`` or
    ``kafka://host:port[,host:port]``; :class:`ConfigurationError` naming the URL otherwise (its
    password, if any, masked)."""
    shown = _redacted(str(url))
    try:
        parts = urlsplit(str(url))
    except ValueError:
        raise ConfigurationError(f"broker URL {shown!r} is not a URL") from None
    if parts.scheme not in _SCHEMES:
        raise ConfigurationError(
            f"broker URL {shown!r} must start with nats:// or kafka:// (nats://HOST:PORT,"
            " kafka://HOST:PORT[,HOST:PORT])"
        )
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ConfigurationError(f"broker URL {shown!r} must be SCHEME://HOST:PORT[,HOST:PORT]")
    userinfo, _, hosts = parts.netloc.rpartition("@")
    if userinfo and parts.scheme == "kafka":
        raise ConfigurationError(f"broker URL {shown!r}: Kafka credentials are not supported yet")
    addresses = hosts.split(",")
    for address in addresses:
        match = _HOST.fullmatch(address)
        if match is None or not 0 < int(match.group(2)) < 65536:
            raise ConfigurationError(
                f"broker URL {shown!r}: {address!r} is not HOST:PORT (a port from 1 to 65535)"
            )
    if userinfo:
        addresses = [f"{userinfo}@{a}" for a in addresses]
    return parts.scheme, addresses


def broker_from_url(
    url: str, *, streams: Sequence[StreamSpec] = (), ack_wait: timedelta | None = None
) -> NatsBroker | KafkaBroker:
    """The broker ``url`` names, not yet connected (it connects on first use)."""
    scheme, addresses = parse_broker_url(url)
    if scheme == "nats":
        return NatsBroker(
            [f"nats://{a}" for a in addresses],
            streams=streams,
            ack_wait=timedelta(minutes=2) if ack_wait is None else ack_wait,
        )
    return KafkaBroker(addresses, streams=streams)


async def connect_broker(
    url: str, *, streams: Sequence[StreamSpec] = (), ack_wait: timedelta | None = None
) -> NatsBroker | KafkaBroker:
    """The broker ``url`` names, with ``streams`` declared on its first use (connection and
    declaration happen then: a broker that is down now is not an error here).

    ``ack_wait`` (NATS): how long JetStream waits for an ack before redelivering (default 2 min;
    it must outlast the consumers' per-event deadline)."""
    return broker_from_url(url, streams=streams, ack_wait=ack_wait)
