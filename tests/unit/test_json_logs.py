"""Structured logs (ADR 0028): one JSON object per line, the lane and the span ids, secrets masked."""

from __future__ import annotations

import io
import json
import logging

import pytest
from tests.support.telemetry import context_of, recording

from outbox_adapters.telemetry.logs import JsonFormatter, json_logging, redact


def record(message: str, *args: object, **extra: object) -> logging.LogRecord:
    made = logging.LogRecord(
        "outbox_adapters.runtime", logging.WARNING, "x.py", 1, message, args, None
    )
    for key, value in extra.items():
        setattr(made, key, value)
    return made


def test_a_record_is_one_json_line_with_level_logger_message_lane_and_row() -> None:
    line = JsonFormatter().format(
        record("row %s: %s", 7, "sent", outbox_lane="email", outbox_row=7, outbox_attempts=2)
    )
    assert "\n" not in line
    found = json.loads(line)
    assert found["level"] == "WARNING"
    assert found["logger"] == "outbox_adapters.runtime"
    assert found["message"] == "row 7: sent"
    assert (found["lane"], found["row"], found["attempts"]) == ("email", 7, 2)
    assert found["time"].endswith("+00:00")
    assert "trace_id" not in found


def test_inside_a_span_the_line_names_the_trace_and_the_span() -> None:
    with recording() as otel:
        tracer = otel.tracer_provider.get_tracer("test")
        with tracer.start_as_current_span("work"):
            found = json.loads(JsonFormatter().format(record("in a span")))
    context = context_of(otel.span("work"))
    assert found["trace_id"] == f"{context.trace_id:032x}"
    assert found["span_id"] == f"{context.span_id:016x}"


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("dial smtp://ann:hunter22@mail.example:587 failed", "smtp://ann:***@mail.example:587"),
        ("postgresql://app:pw0rd!@db/app", "postgresql://app:***@db/app"),
        ("retry with password=s3cret&user=x", "retry with password=***"),
        ("api_key: abcdef123456", "api_key: ***"),
        ("Authorization: Bearer eyJhbGciOi.x.y", "Bearer ***"),
    ],
)
def test_what_looks_like_a_secret_is_masked(text, masked) -> None:
    out = redact(text)
    assert masked in out
    for secret in ("hunter22", "pw0rd!", "s3cret", "abcdef123456", "eyJhbGciOi"):
        assert secret not in out
    line = json.loads(JsonFormatter().format(record("%s", text, outbox_reason=text)))
    assert masked in line["message"]
    assert masked in line["reason"]


def test_an_exception_is_named_by_its_class_never_its_text() -> None:
    try:
        raise ValueError("payload value alice@example.org")  # noqa: TRY301
    except ValueError:
        made = logging.LogRecord(
            "x", logging.ERROR, "x.py", 1, "failed", (), __import__("sys").exc_info()
        )
    found = json.loads(JsonFormatter().format(made))
    assert found["exc_type"] == "ValueError"
    assert "alice" not in json.dumps(found)


def test_json_logging_adds_a_handler_beside_the_host_s_and_the_canary_still_sees_every_record(
    log_canary,
) -> None:
    stream = io.StringIO()
    root = logging.getLogger()
    before = list(root.handlers)
    handler = json_logging(logging.INFO, stream=stream)
    mark = log_canary.mark()
    try:
        assert root.handlers == [*before, handler]  # nothing of the host's removed
        logging.getLogger("outbox_adapters.test").warning(
            "lane %s stalled", "email", extra={"outbox_lane": "email"}
        )
    finally:
        root.removeHandler(handler)
    [line] = stream.getvalue().splitlines()
    assert json.loads(line)["message"] == "lane email stalled"
    [(logger, _level, text)] = log_canary.texts(mark)
    assert logger == "outbox_adapters.test"
    assert line in text  # the canary checks the JSON line itself
