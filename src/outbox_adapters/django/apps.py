"""The Django app of the integration: ``"outbox_adapters.django"`` in ``INSTALLED_APPS``.

Its label is ``leased_outbox`` (without this class Django would derive ``django`` from the module
path, a label that says nothing and may clash); it has no models, only the ``outbox`` management
command (docs/tutorials/django.md).
"""

from __future__ import annotations

from django.apps import AppConfig

__all__ = ["LeasedOutboxConfig"]


class LeasedOutboxConfig(AppConfig):  # type: ignore[misc] # Django ships no types: Any to mypy
    """``"outbox_adapters.django"`` as the ``leased_outbox`` app (Django picks it: the only one)."""

    name = "outbox_adapters.django"
    label = "leased_outbox"
    verbose_name = "Leased outbox"
