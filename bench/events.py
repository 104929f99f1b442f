"""The domain events the relay's and the consumer channel's runs publish, and what both share."""

from __future__ import annotations

from typing import Final

from outbox_adapters.postgres.events import new_event
from outbox_core.events import EventEnvelope
from outbox_core.ports import BrokerMessage

__all__ = ["IN_FLIGHT", "KEYS", "PUBLISH_SECONDS", "TRUNCATE", "nats_headers", "new_events"]

#: Partition keys, in turn (several events per key, as a tenant's lifecycle has).
KEYS: Final = 50
#: PubAcks in flight in the bare diagnostic loop; rows in flight and SMTP sessions of the
#: consumer's e-mail lane.
IN_FLIGHT: Final = 8
#: The budget of one publish (the relay's default) and the bare loop's PubAck timeout.
PUBLISH_SECONDS: Final = 5.0
TRUNCATE: Final = "TRUNCATE outbox_event, outbox_message, outbox_channel_parked RESTART IDENTITY"


def new_events(run: str, events: int) -> list[EventEnvelope]:
    """``events`` fresh ``tenant.provisioned`` events (new ids every call), keys in turn."""
    return [
        new_event(
            key=f"tenant-{n % KEYS:03d}",
            type="tenant.provisioned",
            source="auth",
            data={
                "tenant_id": f"tenant-{n % KEYS:03d}",
                "tenant_name": f"Acme {n}",
                "tenant_slug": f"acme-{n}",
                "admin_email": f"admin{n}@bench.example",
                "admin_display_name": f"Admin {n}",
                "signup_source": run,
            },
        )
        for n in range(events)
    ]


def nats_headers(message: BrokerMessage) -> dict[str, str]:
    return {**message.headers, "Nats-Msg-Id": message.message_id}
