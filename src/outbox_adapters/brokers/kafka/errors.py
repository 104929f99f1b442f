"""aiokafka's exceptions as core outcomes: the Kafka adapter's own error map.

:data:`ERROR_MAP` names aiokafka's exceptions; :data:`ERRORS` applies the shared rules of
:mod:`outbox_adapters.brokers.errors` with it alone, and its methods, exported here as
:func:`describe`, :func:`is_broker_error`, :func:`operation` and :func:`publish_outcome`, are what
the Kafka modules call (docs/adr/0019-brokers.md, "One error mapping").
"""

from __future__ import annotations

from typing import Final

import aiokafka.errors as kafka_errors
import attrs

from outbox_adapters.brokers.errors import BrokerErrors
from outbox_core.outcomes import Outcome

__all__ = [
    "ERRORS",
    "ERROR_MAP",
    "KafkaErrors",
    "describe",
    "is_broker_error",
    "operation",
    "publish_outcome",
]


@attrs.frozen
class KafkaErrors:
    """Kafka's refusals (unknown topic, too large, invalid record) and its timeouts."""

    errors: tuple[type[BaseException], ...] = (kafka_errors.KafkaError,)

    def describe(self, exc: BaseException) -> str | None:
        del exc  # aiokafka's messages say enough: the shared description
        return None

    def outcome(self, exc: BaseException, subject: str, *, sending: bool) -> Outcome | None:
        if isinstance(exc, kafka_errors.UnknownTopicOrPartitionError):
            return Outcome.transient(
                f"Kafka topic {subject!r} does not exist: declare it (StreamSpec)"
            )
        if isinstance(
            exc,
            kafka_errors.MessageSizeTooLargeError
            | kafka_errors.RecordListTooLargeError
            | kafka_errors.InvalidMessageError,
        ):
            return Outcome.permanent(f"the broker refuses this message: {describe(exc)}")
        if isinstance(exc, kafka_errors.KafkaTimeoutError):
            return ERRORS.timeout_outcome(exc, sending=sending)
        return None


ERROR_MAP: Final = KafkaErrors()
#: The shared rules with aiokafka's map only.
ERRORS: Final = BrokerErrors((ERROR_MAP,))
describe: Final = ERRORS.describe
is_broker_error: Final = ERRORS.is_broker_error
operation: Final = ERRORS.operation
publish_outcome: Final = ERRORS.publish_outcome
