"""The in-app channel (consumer group ``notification-inapp``, ADR 0021): events become rows of the
notification feed (``outbox_notification``), one per audience, insert-or-nothing, then ack.

The feed row is the delivery: nothing is sent afterwards, so the event is terminal as soon as its
rows are written (a redelivery finds them and writes nothing). It runs whatever the SMTP
configuration. The mapping from event type to notifications is data (:data:`InAppRecipes`); the
default, :func:`platform_notifications`, knows ``tenant.provisioned`` (one ``platform`` row for the
operators, one ``tenant`` row for the new tenant). Free text is stripped of control characters.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from outbox_adapters.lanes.consumer import Parked, Settlement
from outbox_adapters.postgres.channels import NewNotification, NotificationWriter
from outbox_core.events import EventEnvelope
from outbox_core.mail import clean_line, clean_text
from outbox_core.ports import ReceivedMessage

__all__ = ["INAPP_CHANNEL_GROUP", "InAppChannel", "InAppRecipes", "platform_notifications"]

#: The channel's consumer group.
INAPP_CHANNEL_GROUP: Final = "notification-inapp"
_MAX_TITLE: Final = 200
_MAX_BODY: Final = 2000

#: Event type → ``make(event)``: the event's notifications (raise ``ValueError``/``KeyError``
#: when the event can't make them: the event is parked with the reason).
InAppRecipes = Mapping[str, Callable[[EventEnvelope], Sequence[NewNotification]]]


def _text(data: Mapping[str, Any], name: str) -> str:
    value = data.get(name, "")
    return clean_line(value if isinstance(value, str) else str(value))[:_MAX_TITLE]


def _tenant_provisioned(event: EventEnvelope) -> list[NewNotification]:
    data = event.data
    tenant_id = _text(data, "tenant_id")
    if not tenant_id:
        raise ValueError("the event has no tenant_id")
    name = _text(data, "tenant_name") or _text(data, "tenant_slug") or tenant_id
    admin = _text(data, "admin_email")
    source = _text(data, "signup_source") or "unknown"
    return [
        NewNotification(
            audience="platform",
            tenant_id=None,
            title=f"New tenant: {name}",
            body=f"Tenant {name} ({tenant_id}) signed up via {source}; admin {admin}.",
        ),
        NewNotification(
            audience="tenant",
            tenant_id=tenant_id,
            title=f"Welcome to {name}",
            body=f"Your workspace {name} is ready.",
        ),
    ]


def platform_notifications() -> InAppRecipes:
    """The platform's in-app notifications: ``tenant.provisioned`` → platform + tenant rows."""
    return {"tenant.provisioned": _tenant_provisioned}


class InAppChannel:
    """``lanes.consumer.Channel``: write the event's notifications, then it is terminal."""

    def __init__(
        self,
        writer: NotificationWriter,
        recipes: InAppRecipes,
        *,
        name: str = INAPP_CHANNEL_GROUP,
    ) -> None:
        self._name = name
        self.writer = writer
        self.recipes = recipes

    @property
    def name(self) -> str:
        return self._name

    async def deliver(self, event: EventEnvelope, message: ReceivedMessage) -> Settlement:
        del message
        make = self.recipes.get(event.type)
        if make is None:
            return Settlement.done()
        try:
            notifications = [
                NewNotification(
                    audience=item.audience,
                    tenant_id=item.tenant_id,
                    title=clean_line(item.title)[:_MAX_TITLE],
                    body=clean_text(item.body)[:_MAX_BODY],
                )
                for item in make(event)
            ]
        except (ValueError, KeyError, TypeError) as exc:
            return Settlement.done(Parked("inapp", f"undeliverable: {exc}"))
        await self.writer.write(event.id, notifications)
        return Settlement.done()
