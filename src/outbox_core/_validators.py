"""The attrs validators every value type and setting shares: written once, used everywhere.

Two families. Value checks (:func:`aware`, :func:`positive`) guard the parameter objects the ports
take and raise plain :class:`ValueError`. Setting checks (:func:`duration`, :func:`whole_number`,
:func:`seconds`) guard configuration and raise :class:`~outbox_core.errors.ConfigurationError`
naming the setting as ``<owner> <name>`` (e.g. ``LaneConfig.leader_ttl``, ``SMTP max_sessions``),
so a bad setting is refused at construction with one kind of error, whatever object holds it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from outbox_core.errors import ConfigurationError

__all__ = [
    "aware",
    "duration",
    "key_names",
    "optional_aware",
    "positive",
    "seconds",
    "whole_number",
]

_Validator = Callable[[object, Any, Any], None]


def aware(_inst: object, attribute: Any, value: datetime) -> None:  # noqa: ANN401
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise ValueError(f"{attribute.name} must be a timezone-aware datetime, got {value!r}")


def optional_aware(inst: object, attribute: Any, value: datetime | None) -> None:  # noqa: ANN401
    if value is not None:
        aware(inst, attribute, value)


def positive(_inst: object, attribute: Any, value: timedelta) -> None:  # noqa: ANN401
    if not isinstance(value, timedelta) or value <= timedelta(0):
        raise ValueError(f"{attribute.name} must be a positive timedelta, got {value!r}")


def _name(owner: str, attribute: Any) -> str:  # noqa: ANN401
    return f"{owner}{attribute.name}" if owner.endswith(".") else f"{owner} {attribute.name}"


def duration(owner: str, *, zero_ok: bool = False) -> _Validator:
    """A :class:`~datetime.timedelta` above 0 s (or, with ``zero_ok``, 0 s or more)."""

    def check(_inst: object, attribute: Any, value: Any) -> None:  # noqa: ANN401
        if not isinstance(value, timedelta) or value < timedelta(0) or (not zero_ok and not value):
            bound = "0s or more" if zero_ok else "above 0s"
            raise ConfigurationError(
                f"{_name(owner, attribute)} must be a duration {bound}, got {value!r}"
            )

    return check


def whole_number(owner: str, low: int, high: int | None = None) -> _Validator:
    """An ``int`` (not a ``bool``: ``True`` sessions is a mistake, not 1) in ``low..high``."""

    def check(_inst: object, attribute: Any, value: Any) -> None:  # noqa: ANN401
        ok = isinstance(value, int) and not isinstance(value, bool)
        if not ok or value < low or (high is not None and value > high):
            bounds = f"from {low} to {high}" if high is not None else f"of at least {low}"
            raise ConfigurationError(
                f"{_name(owner, attribute)} must be a whole number {bounds}, got {value!r}"
            )

    return check


def seconds(owner: str) -> _Validator:
    """A finite number of seconds above 0 (an ``int`` or a ``float``, not a ``bool``)."""

    def check(_inst: object, attribute: Any, value: Any) -> None:  # noqa: ANN401
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not ok or not (math.isfinite(value) and value > 0):
            raise ConfigurationError(
                f"{_name(owner, attribute)} must be a finite number of seconds above 0,"
                f" got {value!r}"
            )

    return check


def key_names(owner: str) -> _Validator:
    """A ``frozenset`` of non-empty payload key names.

    A plain set or list would make the rules that hold it mutable (and unhashable); a ``str`` would
    be taken for a set of one-letter keys. Both are refused rather than converted.
    """

    def check(_inst: object, attribute: Any, value: Any) -> None:  # noqa: ANN401
        name = _name(owner, attribute)
        if not isinstance(value, frozenset):
            raise ConfigurationError(
                f"{name} must be a frozenset of key names, got {type(value).__name__} {value!r}"
            )
        for key in sorted(value, key=repr):
            if not isinstance(key, str) or not key:
                raise ConfigurationError(
                    f"{name} must hold non-empty strings (payload key names), got {key!r}"
                )

    return check
