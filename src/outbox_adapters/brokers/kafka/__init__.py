"""The Kafka adapter (aiokafka): needs ``pip install 'leased-outbox[kafka]'`` and nothing of
NATS's.

==================  ====================================================================
module              holds
==================  ====================================================================
:mod:`.broker`      :class:`KafkaBroker` (producer, declaration, the DLQ), :class:`KafkaPublisher`
:mod:`.consumer`    :class:`KafkaConsumer`: a consumer group, contiguous commits after acks
:mod:`.config`      :class:`KafkaClientConfig`: the settings every client of a cluster is given
:mod:`.errors`      aiokafka's exceptions as core outcomes (the Kafka error map)
==================  ====================================================================

What Kafka guarantees, and how each port maps onto it: docs/adr/0019-brokers.md.
"""

from __future__ import annotations

from outbox_adapters.brokers.kafka.broker import KafkaBroker, KafkaPublisher
from outbox_adapters.brokers.kafka.config import KafkaClientConfig
from outbox_adapters.brokers.kafka.consumer import KafkaConsumer, KafkaMessage

__all__ = ["KafkaBroker", "KafkaClientConfig", "KafkaConsumer", "KafkaMessage", "KafkaPublisher"]
