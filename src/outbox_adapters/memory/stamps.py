"""The time an in-memory write is stamped with: the caller's ``now``, or the injected clock's.

PostgreSQL writes ``coalesce(:now, now())``; the in-memory adapters do the same with their
:class:`~outbox_core.ports.Clock` in place of the database clock.
"""

from __future__ import annotations

from datetime import datetime

from outbox_core.ports import Clock

__all__ = ["stamp"]


def stamp(clock: Clock, now: datetime | None) -> datetime:
    """``now`` if given (timezone-aware: a naive one would mix local time with UTC), else the
    clock's time."""
    if now is None:
        return clock.now()
    if now.utcoffset() is None:
        raise ValueError(f"now must be a timezone-aware datetime, got {now!r}")
    return now
