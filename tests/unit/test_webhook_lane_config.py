"""The webhook lanes' pure parts: their configs, the owner's notice, the snippet redaction."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from outbox_adapters.lanes.email import EMAIL_LANE
from outbox_adapters.lanes.webhook_workers import owner_notice
from outbox_adapters.lanes.webhooks import (
    DELIVERY_LANE,
    RETRY_AFTER_CAP,
    WEBHOOK_LANE,
    delivery_lane,
    drain_lane,
    redact_snippet,
)
from outbox_adapters.postgres.webhooks import Endpoint
from outbox_core.backoff import WEBHOOK_BACKOFF
from outbox_core.email_payload import EmailPayload
from outbox_core.errors import StaleDeliveryMark
from outbox_core.signing import WebhookSecret, webhook_headers
from outbox_core.timing import FanOutTiming, WebhookTiming

T0 = datetime(2030, 1, 1, tzinfo=UTC)


def endpoint(owner: str | None) -> Endpoint:
    return Endpoint(
        id=7,
        tenant="acme",
        url="https://hooks.example.org/in",
        event_types=("invoice.paid",),
        enabled=False,
        owner_email=owner,
        disabled_reason="failing with no success for 5 days",
        disabled_at=T0,
        created_at=T0,
        updated_at=T0,
    )


def test_the_lanes_state_their_own_timing_backoff_and_stale_mark_report() -> None:
    drainer, deliveries = drain_lane(), delivery_lane()
    assert (drainer.lane, type(drainer.timing)) == (WEBHOOK_LANE, FanOutTiming)
    assert (deliveries.lane, type(deliveries.timing)) == (DELIVERY_LANE, WebhookTiming)
    assert deliveries.backoff is WEBHOOK_BACKOFF
    assert deliveries.retry_after_cap == RETRY_AFTER_CAP == timedelta(hours=1)
    assert deliveries.stale_mark is StaleDeliveryMark
    assert not drainer.scrub.keys
    assert not deliveries.scrub.keys


def test_the_owner_s_notice_is_a_valid_e_mail_naming_the_endpoint_and_how_to_recover() -> None:
    message = owner_notice(endpoint("ops@example.org"))
    assert message is not None
    assert message.lane == EMAIL_LANE
    mail = EmailPayload.from_payload(dict(message.payload))
    assert mail.to == ("ops@example.org",)
    assert "`outbox endpoints enable $endpoint_id`" in message.payload["text"]
    assert message.payload["endpoint_id"] == "7"  # the template's fields travel with it
    assert message.payload["reason"] == "failing with no success for 5 days"
    assert owner_notice(endpoint(None)) is None


def test_the_snippet_loses_every_secret_and_signature_in_any_form() -> None:
    secret = WebhookSecret(b"k" * 32)
    headers = webhook_headers([secret], msg_id="msg_1", timestamp=1_700_000_000, body=b"{}")
    signature = headers["webhook-signature"]
    bare_key = secret.to_text().removeprefix("whsec_")
    text = f"echo: {signature} / {signature.removeprefix('v1,')} / {secret.to_text()} / {bare_key}"
    clean = redact_snippet(text, [signature, secret.to_text()])
    assert clean == "echo: [redacted] / [redacted] / [redacted] / [redacted]"
    assert redact_snippet("nothing secret here", [signature]) == "nothing secret here"
