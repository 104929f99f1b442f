"""The NATS JetStream adapter (nats-py): needs ``pip install 'leased-outbox[nats]'`` and nothing
of Kafka's.

==================  ====================================================================
module              holds
==================  ====================================================================
:mod:`.broker`      :class:`NatsBroker` (connection, declaration, the DLQ), :class:`NatsPublisher`
:mod:`.consumer`    :class:`NatsConsumer`: a durable pull consumer per subject, explicit acks
:mod:`.errors`      nats-py's exceptions as core outcomes (the NATS error map)
==================  ====================================================================

What JetStream guarantees, and how each port maps onto it: docs/adr/0019-brokers.md.
"""

from __future__ import annotations

from outbox_adapters.brokers.nats.broker import NatsBroker, NatsPublisher
from outbox_adapters.brokers.nats.consumer import JetStreamSource, NatsConsumer, NatsMessage

__all__ = ["JetStreamSource", "NatsBroker", "NatsConsumer", "NatsMessage", "NatsPublisher"]
