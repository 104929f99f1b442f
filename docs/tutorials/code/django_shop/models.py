"""The shop's one model."""

from django.db import models


class Order(models.Model):
    customer = models.EmailField()
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"order {self.pk} for {self.customer}"
