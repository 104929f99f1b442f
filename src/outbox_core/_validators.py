"""attrs validators shared by the value types (aware datetimes, positive durations)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

__all__ = ["aware", "optional_aware", "positive"]


def aware(_inst: object, attribute: Any, value: datetime) -> None:  # noqa: ANN401
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise ValueError(f"{attribute.name} must be a timezone-aware datetime, got {value!r}")


def optional_aware(inst: object, attribute: Any, value: datetime | None) -> None:  # noqa: ANN401
    if value is not None:
        aware(inst, attribute, value)


def positive(_inst: object, attribute: Any, value: timedelta) -> None:  # noqa: ANN401
    if not isinstance(value, timedelta) or value <= timedelta(0):
        raise ValueError(f"{attribute.name} must be a positive timedelta, got {value!r}")
