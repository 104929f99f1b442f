"""Traces and metrics (ADR 0028) over the in-memory store, with the SDK's in-memory exporter/reader.

A span at enqueue (PRODUCER) whose W3C context the row keeps; a span per delivery (CONSUMER), in
a trace of its own, LINKED to the enqueue's; the runtime's counters and histograms per lane.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from opentelemetry import metrics as otel_metrics
from opentelemetry import trace as otel_trace
from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider
from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
from opentelemetry.trace import SpanKind, StatusCode
from tests.support.telemetry import context_of, recording

from outbox_adapters import telemetry
from outbox_adapters.clock import FakeClock
from outbox_adapters.lanes.email import email_lane
from outbox_adapters.lanes.relay import relay_message
from outbox_adapters.memory import MemoryStore, RecordingHandler
from outbox_adapters.postgres.events import event_message, new_event
from outbox_adapters.runtime import BatchReport, Worker
from outbox_adapters.telemetry import providers
from outbox_adapters.telemetry.context import from_headers, to_headers
from outbox_adapters.telemetry.metrics import LaneMetrics
from outbox_core.messages import (
    MAX_TRACE_CONTEXT,
    ClaimedRow,
    ClaimToken,
    NewMessage,
    usable_trace_context,
)
from outbox_core.outcomes import Outcome
from outbox_core.ports import ClaimRequest

T0 = datetime(2030, 1, 1, 9, 0, tzinfo=UTC)
PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def worker(store: MemoryStore, handler: object, clock: FakeClock, **config: object) -> Worker:
    config.setdefault("poll_interval", 0.01)
    return Worker(store, handler, email_lane(**config), clock=clock, jitter=lambda: 0.5)  # type: ignore[arg-type]


async def claim_all(store: MemoryStore, lane: str = "email") -> list[ClaimedRow]:
    token = ClaimToken.from_entropy(b"0123456789abcdef")
    return list(await store.claim_due(ClaimRequest(lane, 100, timedelta(minutes=1), token)))


# --- the enqueue span and the row's context --------------------------------------------------------


async def test_enqueue_makes_a_producer_span_whose_context_the_row_keeps() -> None:
    store = MemoryStore(FakeClock(T0))
    with recording() as otel:
        tracer = otel.tracer_provider.get_tracer("host")
        with tracer.start_as_current_span("POST /signup") as request:
            result = store.enqueue(NewMessage("email", {"to": "a@example.org"}))
        [row] = await claim_all(store)

    span = otel.span("send email")
    assert span.kind is SpanKind.PRODUCER
    assert span.parent is not None
    assert span.parent.span_id == request.get_span_context().span_id  # the host's request
    attributes = dict(span.attributes or {})
    assert attributes["messaging.system"] == "leased_outbox"
    assert attributes["messaging.operation.type"] == "send"
    assert attributes["messaging.destination.name"] == "email"
    assert attributes["messaging.message.id"] == str(result.row_id)
    context = context_of(span)
    assert row.trace_context == (
        f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"
    )


async def test_a_message_that_carries_a_context_keeps_it() -> None:
    store = MemoryStore(FakeClock(T0))
    with recording():
        store.enqueue(NewMessage("email", {}, trace_context=f"{PARENT} vendor=1"))
    [row] = await claim_all(store)
    assert row.trace_context == f"{PARENT} vendor=1"


async def test_without_an_sdk_nothing_is_stored_and_everything_still_works() -> None:
    """The no-op path: the API is installed, no SDK is configured (the suite sets none globally)."""
    telemetry.use()
    clock = FakeClock(T0)
    store = MemoryStore(clock)
    store.enqueue(NewMessage("email", {"n": 1}))
    handler = RecordingHandler()
    stats = await worker(store, handler, clock).run(drain=True)
    assert stats.dispatched == 1
    assert handler.calls[0].row.trace_context is None


def test_no_span_or_instrument_is_made_until_a_provider_is_configured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the API but no SDK, the library makes nothing (the proxies cost tens of microseconds a
    row); it asks the API again at most every RECHECK seconds, and uses a provider set later."""
    telemetry.use()
    now = [100.0]
    asked: list[str] = []
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    proxy = otel_trace.get_tracer_provider()
    meter_proxy = otel_metrics.get_meter_provider()
    configured: dict[str, object] = {"tracing": proxy, "metrics": meter_proxy}

    def tracer_provider() -> object:
        asked.append("tracing")
        return configured["tracing"]

    def meter_provider() -> object:
        asked.append("metrics")
        return configured["metrics"]

    monkeypatch.setattr(otel_trace, "get_tracer_provider", tracer_provider)
    monkeypatch.setattr(otel_metrics, "get_meter_provider", meter_provider)
    assert (providers.tracer(), providers.instruments()) == (None, None)
    assert (providers.tracer(), providers.instruments()) == (None, None)
    assert asked == ["tracing", "metrics"]  # not asked again within the recheck interval
    configured.update(tracing=SdkTracerProvider(), metrics=SdkMeterProvider())
    now[0] += providers.RECHECK / 2
    assert (providers.tracer(), providers.instruments()) == (None, None)
    now[0] += providers.RECHECK
    assert providers.tracer() is not None
    assert providers.instruments() is not None
    assert asked[:4] == ["tracing", "metrics", "tracing", "metrics"]
    telemetry.use()


# --- the delivery span ---------------------------------------------------------------------------


async def test_each_delivery_is_a_consumer_span_in_its_own_trace_linked_to_the_enqueue() -> None:
    clock = FakeClock(T0)
    store = MemoryStore(clock)
    handler = RecordingHandler()
    handler.script(Outcome.sent(), Outcome.permanent("550 5.1.1 no such user"))
    with recording() as otel:
        store.enqueue(NewMessage("email", {"n": 1}))
        store.enqueue(NewMessage("email", {"n": 2}))
        await worker(store, handler, clock).run(drain=True)

    enqueues = otel.spans("send email")
    deliveries = otel.spans("process email")
    assert len(enqueues) == len(deliveries) == 2
    for enqueue, delivery in zip(enqueues, deliveries, strict=True):
        assert delivery.kind is SpanKind.CONSUMER
        assert delivery.parent is None  # a trace of its own ...
        [link] = delivery.links  # ... linked to the enqueue
        assert link.context.trace_id == context_of(enqueue).trace_id
        assert link.context.span_id == context_of(enqueue).span_id
        attributes = dict(delivery.attributes or {})
        assert attributes["messaging.operation.type"] == "process"
        assert attributes["messaging.destination.name"] == "email"
        assert attributes["outbox.attempt"] == 1
    sent, failed = deliveries
    assert sent.status.status_code is StatusCode.UNSET
    assert dict(failed.attributes or {})["error.type"] == "permanent"
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.status.description == "550 5.1.1 no such user"


async def test_a_handler_s_own_spans_are_children_of_the_delivery_span() -> None:
    clock = FakeClock(T0)
    store = MemoryStore(clock)
    with recording() as otel:
        tracer = otel.tracer_provider.get_tracer("smtp")

        async def send(row: ClaimedRow, *, budget: timedelta) -> Outcome:
            with tracer.start_as_current_span("smtp send"):
                return Outcome.sent()

        store.enqueue(NewMessage("email", {}))
        await worker(store, send, clock).run(drain=True)
    child = otel.span("smtp send")
    assert child.parent is not None
    assert child.parent.span_id == context_of(otel.span("process email")).span_id


def test_the_relay_puts_the_row_s_context_in_the_broker_headers() -> None:
    published = event_message("orders", new_event(key="o-1", type="order.placed", data={"n": 1}))
    event = dict(published.payload)
    token = ClaimToken.from_entropy(b"0123456789abcdef")
    row = ClaimedRow(1, "events", event, 1, token, T0, T0, trace_context=f"{PARENT} k=v")
    headers = relay_message(row).headers
    assert headers["traceparent"] == PARENT
    assert headers["tracestate"] == "k=v"
    untraced = ClaimedRow(1, "events", event, 1, token, T0, T0)
    assert "traceparent" not in relay_message(untraced).headers


# --- the stored form ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stored", "headers"),
    [
        (None, {}),
        (PARENT, {"traceparent": PARENT}),
        (f"{PARENT} a=1,b=2 x", {"traceparent": PARENT, "tracestate": "a=1,b=2 x"}),
    ],
)
def test_the_stored_context_and_the_w3c_headers_are_one_another(stored, headers) -> None:
    assert to_headers(stored) == headers
    assert from_headers(headers) == stored


@pytest.mark.parametrize(
    "headers",
    [
        {"traceparent": ""},
        {"traceparent": "two words"},
        {"traceparent": "é" * 10},
        {"tracestate": "a=1"},
    ],
)
def test_headers_without_a_usable_traceparent_give_no_context(headers) -> None:
    assert from_headers(headers) is None


def test_header_names_are_matched_in_any_case() -> None:
    assert from_headers({"TraceParent": PARENT, "TRACESTATE": "k=v"}) == f"{PARENT} k=v"


@pytest.mark.parametrize(
    "value", [None, 7, "", "x" * (MAX_TRACE_CONTEXT + 1), "tab\there", "naïve"]
)
def test_a_stored_context_a_row_may_not_carry_is_dropped_not_raised(value) -> None:
    assert usable_trace_context(value) is None


def test_a_row_or_message_refuses_a_context_it_may_not_carry() -> None:
    token = ClaimToken.from_entropy(b"0123456789abcdef")
    with pytest.raises(ValueError, match="trace context"):
        ClaimedRow(1, "email", {}, 1, token, T0, T0, trace_context="bad\ncontext")
    with pytest.raises(ValueError, match="trace context"):
        NewMessage("email", {}, trace_context="")
    assert usable_trace_context("x" * MAX_TRACE_CONTEXT) == "x" * MAX_TRACE_CONTEXT
    assert usable_trace_context("x") == "x"  # the shortest a row may carry: one character


# --- metrics --------------------------------------------------------------------------------------


async def test_the_worker_reports_sent_failed_retried_and_the_end_to_end_latency() -> None:
    clock = FakeClock(T0)
    store = MemoryStore(clock)
    handler = RecordingHandler()
    handler.script(
        Outcome.sent(), Outcome.sent(), Outcome.permanent("550 no"), Outcome.transient("451 later")
    )
    with recording() as otel:
        for n in range(4):
            store.enqueue(NewMessage("email", {"n": n}))
        clock.advance(timedelta(seconds=7))  # every row waits 7 s before it is sent
        await worker(store, handler, clock).run_once()

        lane = {"outbox.lane": "email"}
        assert otel.total("outbox.sent", **lane) == 2
        assert otel.total("outbox.failed", **lane) == 1
        assert otel.total("outbox.retried", **lane) == 1
        [latency] = otel.points("outbox.end_to_end.duration")
        assert dict(latency.attributes) == lane
        assert (latency.count, latency.sum) == (2, 14.0)
        [claims] = otel.points("outbox.claim.duration")
        assert claims.count == 1
        assert dict(claims.attributes) == lane


async def test_a_send_cut_off_by_its_budget_is_a_budget_overrun() -> None:
    clock = FakeClock(T0)
    store = MemoryStore(clock)
    handler = RecordingHandler()
    handler.script(TimeoutError())  # what asyncio.timeout raises when the row's budget runs out
    store.enqueue(NewMessage("email", {}))
    with recording() as otel:
        report = await worker(store, handler, clock).run_once()
        assert report.budget_overruns == 1
        assert otel.total("outbox.budget_overruns", **{"outbox.budget": "row"}) == 1


def test_every_figure_of_a_batch_report_reaches_its_counter() -> None:
    report = BatchReport(
        dispatched=1,
        skipped=2,
        failed=3,
        retried=4,
        released=5,
        stale_marks=6,
        mark_errors=7,
        handler_errors=8,
        leadership_lost=9,
        budget_overruns=10,
        timed_out=True,
    )
    with recording() as otel:
        LaneMetrics("relay").batch(report)
        LaneMetrics("relay").batch(BatchReport())  # nothing to add: no point appears
        lane = {"outbox.lane": "relay"}
        expected = {
            "outbox.sent": 1,
            "outbox.skipped": 2,
            "outbox.failed": 3,
            "outbox.retried": 4,
            "outbox.released": 5,
            "outbox.stale_marks": 6,
            "outbox.mark_errors": 7,
            "outbox.handler_errors": 8,
            "outbox.leadership_lost": 9,
        }
        for name, value in expected.items():
            assert otel.total(name, **lane) == value, name
        assert otel.total("outbox.budget_overruns", **lane, **{"outbox.budget": "row"}) == 10
        assert otel.total("outbox.budget_overruns", **lane, **{"outbox.budget": "batch"}) == 1
