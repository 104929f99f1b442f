"""What every aiokafka client of one cluster is given: :class:`KafkaClientConfig`.

:class:`~outbox_adapters.brokers.kafka.broker.KafkaBroker` makes its producer, admin clients and
group-less readers from it, and :class:`~outbox_adapters.brokers.kafka.consumer.KafkaConsumer` its
group member: the consumer needs the cluster's settings, not the broker, so the consumer's module
does not import the broker's (which imports it).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import attrs

__all__ = ["KafkaClientConfig"]


def _frozen_options(security: Mapping[str, object]) -> Mapping[str, object]:
    return MappingProxyType(dict(security))


@attrs.frozen
class KafkaClientConfig:
    """One Kafka cluster's client settings, shared by every client made for it."""

    #: The bootstrap servers, comma-separated (aiokafka's ``bootstrap_servers``).
    bootstrap: str
    #: The client id every connection announces.
    client_id: str = "leased-outbox"
    #: aiokafka's TLS/SASL keywords (``BrokerUrl.kafka_security``), given to every client.
    security: Mapping[str, object] = attrs.field(factory=dict, converter=_frozen_options)
    #: How long a request may take, in milliseconds (aiokafka's ``request_timeout_ms``).
    request_timeout_ms: int = 10_000

    def client_options(self) -> dict[str, Any]:
        """The keywords an aiokafka producer, consumer or admin client of this cluster takes."""
        return {
            "bootstrap_servers": self.bootstrap,
            "client_id": self.client_id,
            **self.security,
            "request_timeout_ms": self.request_timeout_ms,
        }
