"""The exported surface is a promise: changing it must be a deliberate, reviewed act."""

from __future__ import annotations

import importlib
import pkgutil

import outbox_core

EXPECTED = {
    "CONSUMER_BACKOFF", "DEFAULT_EMAIL_TIMING", "DEFAULT_SECRET_KEYS", "DEFAULT_WEBHOOK_TIMING",
    "EMAIL_BACKOFF", "ClaimToken", "ClaimedRow", "ConfigurationError", "EmailPayload",
    "EmailStepBudgets", "EmailTiming", "Event", "LaneTiming", "StoreUnavailable", "ExponentialBackoff", "HttpAttempt", "HttpFailure",
    "IllegalTransition", "InvalidMessage", "InvalidPayload", "InvalidRecipient", "Mark",
    "NewMessage", "OutboxError", "Outcome", "OutcomeKind", "OutgoingMail", "RequeueRefused",
    "ScrubRules", "SlotSchedule", "SmtpSecurityPolicy", "SmtpStage", "SmtpTlsMode",
    "StaleDeliveryMark", "StaleMark", "Status", "UnsafeHeader", "WebhookSecret", "WebhookTiming",
    "WebhookVerificationError", "build_message", "classify_http", "classify_smtp_failure",
    "classify_smtp_reply", "decide", "validate_address", "validate_payload", "webhook_headers",
}  # fmt: skip


def test_top_level_exports_are_exactly_the_documented_ones() -> None:
    assert set(outbox_core.__all__) == EXPECTED
    for name in EXPECTED:
        assert getattr(outbox_core, name) is not None


def test_every_module_declares_all_and_exports_only_what_it_defines_or_reexports() -> None:
    for info in pkgutil.iter_modules(outbox_core.__path__):
        module = importlib.import_module(f"outbox_core.{info.name}")
        exported = module.__all__
        assert len(exported) == len(set(exported)), info.name
        missing = [name for name in exported if not hasattr(module, name)]
        assert not missing, (info.name, missing)


def test_every_error_is_an_outbox_error() -> None:
    from outbox_core import errors  # noqa: PLC0415

    for name in errors.__all__:
        assert issubclass(getattr(errors, name), errors.OutboxError)
