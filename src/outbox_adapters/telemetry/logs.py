"""Structured logs: one JSON object per line, on request (``outbox --log-format json``, or
:func:`json_logging` for a host that embeds the workers).

Each line has ``time`` (UTC, ISO 8601), ``level``, ``logger``, ``message``, then what the record
carries: ``lane`` and ``row`` (the library's ``outbox_lane`` / ``outbox_row`` extras), the other
``outbox_*`` extras without their prefix, ``trace_id`` and ``span_id`` when the record was made
inside a recording span (a delivery, an enqueue), and ``exc_type`` for an exception: its class,
never its text or traceback, which could quote a payload.

The library never logs a secret in the first place (docs/reliability.md, security promise 2; the
test suite's log canary checks every record, this formatter's rendering included). As a second
line of defence both formatters here, this JSON one and :class:`TextFormatter` (``outbox
--log-format text``), mask what looks like one in any text they write, with the library's one
redaction (:func:`outbox_core.redaction.redact_text`): a URL's password (``smtp://user:***@host``,
``postgresql://:***@db``), secret query parameters and libpq ``key=value`` pairs (``password``,
``sslpassword``, ``token``, ``api_key`` ..., quoted or not), the credential of an
``Authorization`` scheme (``Bearer ***``) and webhook signing secrets and keys (``whsec_***``,
``whsk_***``).
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import IO, Any, Final

from outbox_adapters.telemetry import providers
from outbox_core.redaction import redact_text as redact
from outbox_core.redaction import redact_value

__all__ = ["TEXT_FORMAT", "JsonFormatter", "TextFormatter", "json_logging", "redact"]

#: The text formatter's line: time, level, logger, message.
TEXT_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"
#: Extras the library sets, shown under shorter names.
_RENAMED: Final = {"outbox_lane": "lane", "outbox_row": "row"}
_PREFIX: Final = "outbox_"


def _span_ids() -> dict[str, str]:
    if not providers.AVAILABLE:
        return {}
    from opentelemetry.trace import get_current_span  # noqa: PLC0415 - the API is optional

    context = get_current_span().get_span_context()
    if not context.is_valid:
        return {}
    return {"trace_id": f"{context.trace_id:032x}", "span_id": f"{context.span_id:016x}"}


class JsonFormatter(logging.Formatter):
    """Formats a record as one JSON object on one line (see the module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a broken format string must not lose the line
            message = str(record.msg)
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": redact(message),
        }
        for key, value in vars(record).items():
            if key.startswith(_PREFIX):
                line[_RENAMED.get(key, key.removeprefix(_PREFIX))] = redact_value(value)
        line.update(_span_ids())
        if record.exc_info and record.exc_info[0] is not None:
            line["exc_type"] = record.exc_info[0].__qualname__
        return json.dumps(line, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """Formats a record as :data:`TEXT_FORMAT` (an exception's traceback after it), the whole
    text redacted (see the module docstring)."""

    def __init__(self, fmt: str = TEXT_FORMAT) -> None:
        super().__init__(fmt)

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


def json_logging(
    level: int | str = logging.INFO, *, stream: IO[str] | None = None
) -> logging.Handler:
    """Log the library's records (``outbox_adapters``, ``outbox_core``) as JSON lines on ``stream``
    (default stderr) at ``level``; returns the handler (``logging.getLogger().removeHandler`` undoes
    it).

    The handler goes on the ROOT logger, beside whatever the host set up, so the host's own records
    come out as JSON too and no handler of the host's is removed. The library's loggers get
    ``level`` unless the host already set theirs.
    """
    handler = logging.StreamHandler(sys.stderr if stream is None else stream)
    handler.setFormatter(JsonFormatter())
    handler.setLevel(level)
    logging.getLogger().addHandler(handler)
    for name in ("outbox_adapters", "outbox_core"):
        logger = logging.getLogger(name)
        if logger.level == logging.NOTSET:
            logger.setLevel(level)
    return handler
