"""The exported surface is a promise: changing it must be a deliberate, reviewed act."""

from __future__ import annotations

import importlib
import pkgutil

import outbox_core

EXPECTED = {
    "CONSUMER_BACKOFF", "DEFAULT_EMAIL_TIMING", "DEFAULT_SECRET_KEYS", "DEFAULT_WEBHOOK_TIMING",
    "EMAIL_BACKOFF", "WEBHOOK_BACKOFF", "FanOutTiming", "Attachment", "ClaimToken", "ClaimedRow", "ConfigurationError", "EmailPayload",
    "EmailStepBudgets", "EmailTiming", "Event", "LaneTiming", "StoreUnavailable", "ExponentialBackoff", "HttpAttempt", "HttpFailure",
    "IllegalTransition", "InvalidMessage", "InvalidPayload", "InvalidRecipient", "Mark",
    "NewMessage", "OutboxError", "Outcome", "OutcomeKind", "OutgoingMail", "RelayTiming", "RequeueRefused",
    "ScrubRules", "SlotSchedule", "SmtpSecurityPolicy", "SmtpStage", "SmtpTlsMode",
    "StaleMark", "Status", "UnsafeHeader", "WebhookSecret", "WebhookTiming",
    "WebhookVerificationError", "build_message", "classify_http", "classify_smtp_failure",
    "classify_smtp_reply", "decide", "validate_address", "validate_payload", "webhook_headers",
}  # fmt: skip


def test_top_level_exports_are_exactly_the_documented_ones() -> None:
    assert set(outbox_core.__all__) == EXPECTED
    for name in EXPECTED:
        assert getattr(outbox_core, name) is not None


def test_every_module_declares_all_and_exports_only_what_it_defines_or_reexports() -> None:
    # walk_packages: the modules of subpackages (outbox_core.mail.*) too.
    for info in pkgutil.walk_packages(outbox_core.__path__, prefix="outbox_core."):
        module = importlib.import_module(info.name)
        exported = module.__all__
        assert len(exported) == len(set(exported)), info.name
        missing = [name for name in exported if not hasattr(module, name)]
        assert not missing, (info.name, missing)


def test_the_mail_package_reexports_every_public_name_of_its_modules() -> None:
    from outbox_core import mail  # noqa: PLC0415

    for info in pkgutil.iter_modules(mail.__path__, prefix="outbox_core.mail."):
        module = importlib.import_module(info.name)
        for name in module.__all__:
            assert name in mail.__all__, (info.name, name)
            assert getattr(mail, name) is getattr(module, name)


def test_every_error_is_an_outbox_error() -> None:
    from outbox_core import errors  # noqa: PLC0415

    for name in errors.__all__:
        assert issubclass(getattr(errors, name), errors.OutboxError)
