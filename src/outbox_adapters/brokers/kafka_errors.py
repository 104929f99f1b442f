"""aiokafka's exceptions as core outcomes: the Kafka adapter's error map (see :mod:`.errors`)."""

from __future__ import annotations

from typing import Final

import aiokafka.errors as kafka_errors
import attrs

from outbox_adapters.brokers.errors import describe, timeout_outcome
from outbox_core.outcomes import Outcome

__all__ = ["ERROR_MAP", "KafkaErrors"]


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
            return timeout_outcome(exc, sending=sending)
        return None


ERROR_MAP: Final = KafkaErrors()
