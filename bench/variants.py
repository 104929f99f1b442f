"""Which optional pieces of the library are present in this tree, checked when the bench runs.

Pieces land in their own issues (SMTP session reuse, LISTEN/NOTIFY wake-ups); the harness uses each
one when it is there and records in the results which variant ran, so a figure is never read as
measuring something it did not.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from typing import Any

import attrs

from outbox_adapters.runtime import LaneConfig, Worker
from outbox_adapters.smtp import SmtpSettings

__all__ = ["describe", "smtp_session_reuse", "wakeup_listener", "worker_accepts_wakeup"]


def smtp_session_reuse() -> bool:
    """``SmtpSettings(max_sessions=...)``: the mailer keeps STARTTLS sessions open and reuses them."""
    return "max_sessions" in attrs.fields_dict(SmtpSettings)


def worker_accepts_wakeup() -> bool:
    return "wakeup" in inspect.signature(Worker.__init__).parameters


def wakeup_listener() -> Any:  # noqa: ANN401 - the class, when the module exists
    """``outbox_adapters.postgres.notify.WakeupListener`` if present and the worker takes it."""
    try:
        found = importlib.util.find_spec("outbox_adapters.postgres.notify")
    except ModuleNotFoundError:
        return None
    if found is None or not worker_accepts_wakeup():
        return None
    module = importlib.import_module("outbox_adapters.postgres.notify")
    return getattr(module, "WakeupListener", None)


def describe() -> dict[str, Any]:
    """What the results record about the tree that was measured."""
    return {
        "smtp_session_reuse": smtp_session_reuse(),
        "wakeup_listener": wakeup_listener() is not None,
        "worker_rows_in_flight": "rows_in_flight" in attrs.fields_dict(LaneConfig),
    }
