"""The webhook model's values and rules, as :mod:`outbox_adapters.webhook_model` defines them for
every webhook repository (this one and the in-memory one); re-exported here, where the PostgreSQL
repository's callers have always found them."""

from outbox_adapters.webhook_model import (
    ANY_EVENT_TYPE,
    DeliveryGroup,
    DeliveryReport,
    DeliveryTarget,
    Endpoint,
    FanOut,
    Missed,
    Replay,
    WebhookRefused,
    check_event_type,
    check_event_types,
    check_ordering_key,
    check_tenant,
    event_body,
    event_of,
    new_msg_id,
    webhook_message,
)

__all__ = [
    "ANY_EVENT_TYPE",
    "DeliveryGroup",
    "DeliveryReport",
    "DeliveryTarget",
    "Endpoint",
    "FanOut",
    "Missed",
    "Replay",
    "WebhookRefused",
    "check_event_type",
    "check_event_types",
    "check_ordering_key",
    "check_tenant",
    "event_body",
    "event_of",
    "new_msg_id",
    "webhook_message",
]
