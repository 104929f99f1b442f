"""The one place where nats-py and aiokafka exceptions become core outcomes and errors.

A publish never raises for broker trouble: :func:`publish_outcome` turns the exception into an
:class:`~outbox_core.outcomes.Outcome` (the relay retries a transient one next tick). Everything
else (declaring, listing and redriving the DLQ, connecting) raises :class:`BrokerUnavailable` for an
outage, a subclass of the core's :class:`~outbox_core.errors.StoreUnavailable`: the broker is the
event store of the consumers, and code that already retries a store outage (the runtime, the CLI's
exit codes) handles a broker outage the same way without learning a new type.

==========================================  ============================================
exception                                   publish outcome
==========================================  ============================================
a timeout (ours, nats-py's, Kafka's)        transient; ``maybe_delivered`` once connected
                                            (the broker may have stored it: the replay is
                                            dropped or de-duplicated)
connection refused / closed / no servers    transient
JetStream "no stream stores the subject"    transient, naming the missing declaration
Kafka unknown topic, not leader, retriable  transient
Kafka message too large, invalid record     permanent (retrying cannot help)
JetStream API error (other)                 transient with its code and description
==========================================  ============================================
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable

import aiokafka.errors as kafka_errors
import nats.errors
import nats.js.errors

from outbox_core.errors import StoreUnavailable
from outbox_core.outcomes import Outcome

__all__ = ["BrokerUnavailable", "describe", "is_broker_error", "operation", "publish_outcome"]

log = logging.getLogger("outbox.brokers")
_MAX_REASON = 200

#: Everything a broker client raises for an outage or a refusal (not a bug of ours).
_BROKER_ERRORS: tuple[type[BaseException], ...] = (
    nats.errors.Error,
    kafka_errors.KafkaError,
    OSError,
    TimeoutError,
)


class BrokerUnavailable(StoreUnavailable):
    """The broker could not be reached, or refused an operation: an outage, worth retrying."""


def _clip(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _MAX_REASON else flat[: _MAX_REASON - 1] + "…"


def describe(exc: BaseException) -> str:
    """A short, loggable description (type and message; never a body or a header)."""
    if isinstance(exc, nats.js.errors.APIError):
        return _clip(f"JetStream error {exc.err_code or exc.code}: {exc.description or ''}")
    text = str(exc).strip()
    name = type(exc).__name__
    return _clip(f"{name}: {text}" if text and text != name else name)


def is_broker_error(exc: BaseException) -> bool:
    return isinstance(exc, _BROKER_ERRORS)


def publish_outcome(  # noqa: PLR0911
    exc: BaseException, subject: str, *, sending: bool = True
) -> Outcome | None:
    """The outcome of a publish to ``subject`` that raised ``exc``; ``None`` when ``exc`` is not a
    broker error (a bug: let it propagate). ``sending``: the client was connected and the publish
    may have left (False while still connecting: nothing can have been stored)."""
    if isinstance(exc, nats.js.errors.NoStreamResponseError):
        return Outcome.transient(
            f"no JetStream stream stores subject {subject!r}: declare it (StreamSpec)"
        )
    if isinstance(exc, kafka_errors.UnknownTopicOrPartitionError):
        return Outcome.transient(f"Kafka topic {subject!r} does not exist: declare it (StreamSpec)")
    if isinstance(
        exc,
        kafka_errors.MessageSizeTooLargeError
        | kafka_errors.RecordListTooLargeError
        | kafka_errors.InvalidMessageError
        | nats.errors.MaxPayloadError,
    ):
        return Outcome.permanent(f"the broker refuses this message: {describe(exc)}")
    if isinstance(exc, kafka_errors.KafkaTimeoutError | TimeoutError):
        # The request may have reached the broker: it may be stored (a replay is de-duplicated).
        if not sending:
            return Outcome.transient(f"broker unavailable: no connection in time ({describe(exc)})")
        return Outcome.transient(
            f"no acknowledgement in time ({describe(exc)})", maybe_delivered=True
        )
    if isinstance(exc, nats.js.errors.APIError):
        return Outcome.transient(f"the broker refused the publish: {describe(exc)}")
    if isinstance(exc, _BROKER_ERRORS):
        return Outcome.transient(f"broker unavailable: {describe(exc)}")
    return None


@contextlib.asynccontextmanager
async def operation(what: str, why: Callable[[], str] = lambda: "") -> AsyncIterator[None]:
    """Translate a broker client's exception inside an operator or consumer operation into
    :class:`BrokerUnavailable` naming ``what`` (``"declaring stream platform-events"``) and what
    ``why()`` adds (the cause the client reported on the side, e.g. a TLS refusal)."""
    try:
        yield
    except BrokerUnavailable:
        raise
    except _BROKER_ERRORS as exc:
        raise BrokerUnavailable(f"{what} failed: {describe(exc)}{why()}") from exc
