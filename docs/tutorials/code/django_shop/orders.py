"""Placing an order: the order row and its confirmation e-mail in one ``transaction.atomic()``."""

from django.db import transaction

from django_shop.models import Order
from outbox_adapters.django import enqueue
from outbox_adapters.lanes.email import EMAIL_LANE, email_message


# --8<-- [start:place_order]
def place_order(customer: str, *, lane: str = EMAIL_LANE) -> int:
    """Save the order and enqueue its confirmation: both commit, or neither does."""
    with transaction.atomic():
        order = Order.objects.create(customer=customer)
        # A bad address raises InvalidRecipient here, and the block rolls the order back.
        confirmation = email_message(
            to=customer,
            subject="Order $order received",
            text="Thanks! Order $order is in; we will write again when it ships.",
            fields={"order": str(order.pk)},
            idempotency_key=f"order-{order.pk}/received",
            lane=lane,
        )
        enqueue(confirmation)  # on Django's own connection, inside this block
    return int(order.pk)


# --8<-- [end:place_order]
