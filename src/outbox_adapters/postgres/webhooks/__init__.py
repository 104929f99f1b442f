"""The webhook model on PostgreSQL (ADR 0017): its tables, ``enqueue_webhook`` on the host's
transaction, the host API of one tenant's webhooks on the host's transaction
(:class:`TenantWebhooks`, :class:`AsyncTenantWebhooks`), and :class:`WebhookRepository` (atomic fan-out into born-leased deliveries, delivery
targets, endpoints and their secrets, replay, endpoint health, the delivery report).

The webhook outbox and the deliveries are queue tables: claim, mark and release them with the one
:class:`~outbox_adapters.postgres.PostgresStore` (``PostgresStore(pool, table=outbox_webhook_delivery)``).
"""

from outbox_adapters.postgres.webhooks.endpoints import (
    DEFAULT_HEALTH_WINDOW,
    DEFAULT_SECRET_OVERLAP,
    check_endpoint_url,
)
from outbox_adapters.postgres.webhooks.enqueue import enqueue_webhook, enqueue_webhook_async
from outbox_adapters.postgres.webhooks.model import (
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
    check_ordering_key,
    check_tenant,
    event_body,
    event_of,
    webhook_message,
)
from outbox_adapters.postgres.webhooks.repository import WebhookRepository
from outbox_adapters.postgres.webhooks.secrets import (
    SEAL_COMMAND,
    SecretCensus,
    SecretSealing,
    seal_stored_secrets,
    secret_census,
)
from outbox_adapters.postgres.webhooks.tables import (
    DELIVERY_LANE,
    WEBHOOK_LANE,
    outbox_webhook,
    outbox_webhook_delivery,
    outbox_webhook_endpoint,
    outbox_webhook_event,
    outbox_webhook_secret,
)
from outbox_adapters.postgres.webhooks.tenants import (
    UNCHANGED,
    AsyncTenantWebhooks,
    AttemptView,
    CreatedEndpoint,
    DeliveryView,
    TenantWebhooks,
    TestEvent,
)

__all__ = [
    "ANY_EVENT_TYPE",
    "DEFAULT_HEALTH_WINDOW",
    "DEFAULT_SECRET_OVERLAP",
    "DELIVERY_LANE",
    "SEAL_COMMAND",
    "UNCHANGED",
    "WEBHOOK_LANE",
    "AsyncTenantWebhooks",
    "AttemptView",
    "CreatedEndpoint",
    "DeliveryGroup",
    "DeliveryReport",
    "DeliveryTarget",
    "DeliveryView",
    "Endpoint",
    "FanOut",
    "Missed",
    "Replay",
    "SecretCensus",
    "SecretSealing",
    "TenantWebhooks",
    "TestEvent",
    "WebhookRefused",
    "WebhookRepository",
    "check_endpoint_url",
    "check_event_type",
    "check_ordering_key",
    "check_tenant",
    "enqueue_webhook",
    "enqueue_webhook_async",
    "event_body",
    "event_of",
    "outbox_webhook",
    "outbox_webhook_delivery",
    "outbox_webhook_endpoint",
    "outbox_webhook_event",
    "outbox_webhook_secret",
    "seal_stored_secrets",
    "secret_census",
    "webhook_message",
]
