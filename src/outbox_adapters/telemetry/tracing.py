"""Spans with the OpenTelemetry messaging semantic conventions: one at enqueue, one per delivery.

=============================  ========  ====================================================
span                           kind      where
=============================  ========  ====================================================
``send <lane>``                PRODUCER  every enqueue (e-mail, webhook event, domain event, a
                                         channel's recipient rows), PostgreSQL and memory
``process <lane>``             CONSUMER  every row a lane's runtime attempts (one per attempt)
``process <subject>``          CONSUMER  every broker delivery a consumer channel settles
=============================  ========  ====================================================

The producer span's context is written in the row (:mod:`.context`) and, by the relay, in the broker
message's headers. A delivery span is the root of a trace of its own (it runs long after, in another
process) and carries a **link** to that context, as the conventions ask for a consumer of a message
sent earlier; the spans a handler makes (an HTTP client's, a broker client's) are its children.

Attributes: ``messaging.system`` (``leased_outbox``), ``messaging.operation.type`` (``send`` /
``process``), ``messaging.operation.name`` (``enqueue``, ``deliver``, ``consume``),
``messaging.destination.name`` (the lane, or the broker subject), ``messaging.message.id`` (the row
id, or the broker message id), ``messaging.consumer.group.name`` (a channel), and the library's own
``outbox.queue`` (the table), ``outbox.attempt``, ``outbox.outcome``. A failure sets the span's
status to ERROR with ``error.type`` (the outcome kind, or the exception's class): no exception
text, which could quote a payload.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import attrs

from outbox_adapters.telemetry import providers
from outbox_adapters.telemetry.context import TRACEPARENT, from_headers, to_headers

if TYPE_CHECKING:  # attrs never resolves these annotations: the API stays optional
    from opentelemetry.trace import Span, Tracer  # noqa: TC004

    from outbox_core.messages import ClaimedRow, NewMessage, RowId  # noqa: TC004
    from outbox_core.outcomes import Outcome

__all__ = [
    "SYSTEM",
    "Delivery",
    "Produced",
    "consuming",
    "delivering",
    "producing",
    "producing_each",
]

#: ``messaging.system`` of every span the library makes.
SYSTEM: Final = "leased_outbox"

if providers.AVAILABLE:
    from opentelemetry.trace import (
        Link,
        SpanKind,
        Status,
        StatusCode,
        get_current_span,
        set_span_in_context,
    )
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    _PROPAGATOR = TraceContextTextMapPropagator()


@attrs.define
class Produced:
    """What :func:`producing` yields: the message to write, stamped with the span's context."""

    message: NewMessage
    span: Span | None = None

    def wrote(self, row_id: RowId | None, *, created: bool) -> None:
        """Name the row the enqueue wrote (or found, ``created=False``; ``None`` when the write
        did not read the existing row's id)."""
        if self.span is not None:
            if row_id is not None:
                self.span.set_attribute("messaging.message.id", str(row_id))
            self.span.set_attribute("outbox.created", created)


@attrs.define
class Delivery:
    """What :func:`delivering` yields: report the attempt's outcome on it."""

    span: Span | None = None

    def ended(self, outcome: Outcome) -> None:
        span = self.span
        if span is None or not span.is_recording():
            return
        kind = str(outcome.kind)
        span.set_attribute("outbox.outcome", kind)
        if kind != "sent":
            span.set_attribute("error.type", kind)
            # The reason is what the row's last_error keeps: a sentence, never a secret.
            span.set_status(Status(StatusCode.ERROR, outcome.reason or kind))


def _error(span: Span, exc: BaseException) -> None:
    span.set_attribute("error.type", type(exc).__qualname__)
    span.set_status(Status(StatusCode.ERROR))


@contextlib.contextmanager
def producing(message: NewMessage, *, queue: str) -> Iterator[Produced]:
    """A PRODUCER span around one enqueue; yields the message stamped with its trace context (a
    message that already carries one keeps it)."""
    tracer = providers.tracer()
    if tracer is None:
        yield Produced(message)
        return
    with tracer.start_as_current_span(
        f"send {message.lane}",
        kind=SpanKind.PRODUCER,
        attributes=_producer_attributes(message, queue),
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield Produced(_stamped(message, span), span)
        except BaseException as exc:
            _error(span, exc)
            raise


@contextlib.contextmanager
def producing_each(messages: Sequence[NewMessage], *, queue: str) -> Iterator[list[Produced]]:
    """:func:`producing` for messages written by one statement: one PRODUCER span per message,
    siblings under the current span (none of them current), each message stamped with its own
    span's context; all end when the write does."""
    tracer = providers.tracer()
    if tracer is None:
        yield [Produced(message) for message in messages]
        return
    spans = [
        tracer.start_span(
            f"send {message.lane}",
            kind=SpanKind.PRODUCER,
            attributes=_producer_attributes(message, queue),
            record_exception=False,
            set_status_on_exception=False,
        )
        for message in messages
    ]
    try:
        yield [
            Produced(_stamped(message, span), span)
            for message, span in zip(messages, spans, strict=True)
        ]
    except BaseException as exc:
        for span in spans:
            _error(span, exc)
        raise
    finally:
        for span in spans:
            span.end()


def _producer_attributes(message: NewMessage, queue: str) -> dict[str, Any]:
    return {
        "messaging.system": SYSTEM,
        "messaging.operation.type": "send",
        "messaging.operation.name": "enqueue",
        "messaging.destination.name": message.lane,
        "outbox.queue": queue,
    }


def _stamped(message: NewMessage, span: Span) -> NewMessage:
    """``message`` with ``span``'s W3C context in its ``trace_context``, unless it has one."""
    if message.trace_context is not None or not span.get_span_context().is_valid:
        return message
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=set_span_in_context(span))
    stored = from_headers(carrier)
    return message if stored is None else attrs.evolve(message, trace_context=stored)


def _links(trace_context: str | None) -> list[Link]:
    if trace_context is None:
        return []
    linked = get_current_span(_PROPAGATOR.extract(to_headers(trace_context))).get_span_context()
    return [Link(linked)] if linked.is_valid else []


#: What :func:`delivering` gives when nothing is traced: one shared no-op, no generator per row.
_UNTRACED: Final = contextlib.nullcontext(Delivery())


def delivering(
    row: ClaimedRow, *, queue: str | None = None
) -> contextlib.AbstractContextManager[Delivery]:
    """A CONSUMER span around one attempt of ``row``, linked to its enqueue's span (a shared no-op
    when nothing is traced: this is on every row's path)."""
    tracer = providers.tracer()
    if tracer is None:
        return _UNTRACED
    return _delivering(tracer, row, queue)


@contextlib.contextmanager
def _delivering(tracer: Tracer, row: ClaimedRow, queue: str | None) -> Iterator[Delivery]:
    attributes: dict[str, Any] = {
        "messaging.system": SYSTEM,
        "messaging.operation.type": "process",
        "messaging.operation.name": "deliver",
        "messaging.destination.name": row.lane,
        "messaging.message.id": str(row.id),
        "outbox.attempt": row.attempts,
    }
    if queue is not None:
        attributes["outbox.queue"] = queue
    with _consumer_span(tracer, f"process {row.lane}", attributes, row.trace_context) as span:
        yield Delivery(span)


@contextlib.contextmanager
def consuming(
    *, subject: str, message_id: str, headers: Mapping[str, str], group: str
) -> Iterator[Span | None]:
    """A CONSUMER span around one broker delivery a channel settles, linked to the enqueue whose
    context the relay put in the message's headers."""
    tracer = providers.tracer()
    if tracer is None:
        yield None
        return
    attributes = {
        "messaging.system": SYSTEM,
        "messaging.operation.type": "process",
        "messaging.operation.name": "consume",
        "messaging.destination.name": subject,
        "messaging.message.id": message_id,
        "messaging.consumer.group.name": group,
    }
    stored = from_headers(headers) if TRACEPARENT in {k.lower() for k in headers} else None
    with _consumer_span(tracer, f"process {subject}", attributes, stored) as span:
        yield span


@contextlib.contextmanager
def _consumer_span(
    tracer: Any,  # noqa: ANN401 - an opentelemetry Tracer
    name: str,
    attributes: Mapping[str, Any],
    trace_context: str | None,
) -> Iterator[Span]:
    # A new trace (context=an empty one), not a child of whatever span is current: the delivery
    # is its own unit of work, tied to the enqueue by the link.
    with tracer.start_as_current_span(
        name,
        context=_ROOT,
        kind=SpanKind.CONSUMER,
        attributes=attributes,
        links=_links(trace_context),
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except BaseException as exc:
            _error(span, exc)
            raise


if providers.AVAILABLE:
    from opentelemetry.context import Context

    _ROOT = Context()
