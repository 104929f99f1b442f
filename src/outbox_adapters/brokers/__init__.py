"""Broker adapters: NATS JetStream and Kafka behind the core's ``Publisher`` and ``Consumer``
ports, with explicit stream/topic declaration and a dead-letter queue to list and redrive.
docs/adr/0019-brokers.md says what each broker guarantees.

=====================  ========================================================================
module                 holds
=====================  ========================================================================
:mod:`.nats`           the NATS JetStream adapter (nats-py): :class:`NatsBroker`, its publisher,
                       its consumer and its error map
:mod:`.kafka`          the Kafka adapter (aiokafka): :class:`KafkaBroker`, its publisher, its
                       consumer group, :class:`KafkaClientConfig` and its error map
:mod:`.urls`           broker URLs: TLS, credentials, Kafka's SASL
:mod:`.errors`         what every broker's errors share; :class:`BrokerUnavailable`
:mod:`.embedded`       a ``nats-server`` to run (the demo, the benchmarks, the tests)
=====================  ========================================================================

Each adapter is a package that imports its own client library and never the other's, and this
package imports neither: each broker's package is imported on first use
(``outbox_adapters.brokers.NatsBroker``, or a URL that names it), so
``pip install 'leased-outbox[nats]'`` needs no aiokafka and the other way round; a broker whose
extra is missing raises :class:`~outbox_adapters.extras.MissingExtra` naming it
(docs/adr/0031-application-object-and-extras.md).

``connect_broker("nats://127.0.0.1:4222")`` or ``connect_broker("kafka://h1:9092,h2:9092")``
(``tls://`` and ``kafkas://`` for TLS, with credentials and SASL: :mod:`.urls`) returns a
:class:`~outbox_core.brokers.Broker`. It connects on first use: a relay may start while the broker
is down (its publishes are ``transient`` until the broker is back).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final

from outbox_adapters.brokers.errors import BrokerUnavailable
from outbox_adapters.brokers.urls import BrokerUrl
from outbox_adapters.extras import missing_extra
from outbox_core.brokers import Broker, DeadLetter, StreamSpec, dlq_subject, park_message

if TYPE_CHECKING:
    from outbox_adapters.brokers.kafka import (
        KafkaBroker,
        KafkaClientConfig,
        KafkaConsumer,
        KafkaPublisher,
    )
    from outbox_adapters.brokers.nats import NatsBroker, NatsConsumer, NatsPublisher

__all__ = [
    "Broker",
    "BrokerUnavailable",
    "BrokerUrl",
    "DeadLetter",
    "KafkaBroker",
    "KafkaClientConfig",
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
    "require_broker",
]

#: The names imported on first use, and the broker package of each.
_LAZY: Final = {
    "KafkaBroker": "outbox_adapters.brokers.kafka",
    "KafkaClientConfig": "outbox_adapters.brokers.kafka",
    "KafkaPublisher": "outbox_adapters.brokers.kafka",
    "KafkaConsumer": "outbox_adapters.brokers.kafka",
    "NatsBroker": "outbox_adapters.brokers.nats",
    "NatsConsumer": "outbox_adapters.brokers.nats",
    "NatsPublisher": "outbox_adapters.brokers.nats",
}


def _load(module: str, what: str) -> Any:  # noqa: ANN401 - a module
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise missing_extra(exc, what) from exc


def __getattr__(name: str) -> Any:  # noqa: ANN401 - PEP 562: the broker classes, on first use
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(_load(module, name), name)


def parse_broker_url(url: str) -> BrokerUrl:
    """The broker, addresses, TLS and credentials ``url`` names (:class:`~.urls.BrokerUrl`);
    :class:`ConfigurationError` naming the URL (its password masked) otherwise."""
    return BrokerUrl.parse(url)


def require_broker(url: str) -> BrokerUrl:
    """``url`` parsed, once its broker's adapter imports: a command checks this before it opens
    anything else, so a missing extra is the first thing it says.

    Raises :class:`ValueError` for a malformed URL and
    :class:`~outbox_adapters.extras.MissingExtra` when that broker's extra is missing."""
    parsed = BrokerUrl.parse(url)
    _adapter(parsed)
    return parsed


def _adapter(parsed: BrokerUrl) -> Any:  # noqa: ANN401 - a module
    """The adapter package of the broker ``parsed`` names (:mod:`.nats` or :mod:`.kafka`;
    ``MissingExtra`` without its extra)."""
    return _load(f"outbox_adapters.brokers.{parsed.broker}", f"a {parsed.broker}:// broker")


def broker_from_url(
    url: str, *, streams: Sequence[StreamSpec] = (), ack_wait: timedelta | None = None
) -> NatsBroker | KafkaBroker:
    """The broker ``url`` names, not yet connected (it connects on first use).

    Raises :class:`~outbox_adapters.extras.MissingExtra` when that broker's extra is missing."""
    parsed = BrokerUrl.parse(url)
    if parsed.broker == "nats":
        return _adapter(parsed).NatsBroker(  # type: ignore[no-any-return]
            parsed.nats_servers(),
            streams=streams,
            ack_wait=timedelta(minutes=2) if ack_wait is None else ack_wait,
            tls=parsed.ssl_context(),
            user=parsed.username,
            password=parsed.password,
        )
    return _adapter(parsed).KafkaBroker(  # type: ignore[no-any-return]
        parsed.addresses, streams=streams, security=parsed.kafka_security()
    )


async def connect_broker(
    url: str, *, streams: Sequence[StreamSpec] = (), ack_wait: timedelta | None = None
) -> NatsBroker | KafkaBroker:
    """The broker ``url`` names, with ``streams`` declared on its first use (connection and
    declaration happen then: a broker that is down at this call is not an error).

    ``ack_wait`` (NATS): how long JetStream waits for an ack before redelivering (default 2 min;
    it must outlast the consumers' per-event deadline)."""
    return broker_from_url(url, streams=streams, ack_wait=ack_wait)
