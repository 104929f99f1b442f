"""``outbox top``'s model: one lane's live figures, and the little renderings it needs.

The adapter reads the figures (:mod:`outbox_adapters.postgres.top`); the CLI draws them. What is
decided here: what a lane's row holds, how an error is named as a class (its text up to the first
colon, addresses masked, so the class groups rows and shows no recipient), and how a series of
backlog ages becomes a sparkline.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Final

import attrs

from outbox_core.operator import ErrorGroup

__all__ = ["SPARKS", "ChannelRow", "LaneRow", "error_class", "error_classes", "sparkline"]

SPARKS: Final = "▁▂▃▄▅▆▇█"
_ADDRESS: Final = re.compile(r"\S+@\S+")
_MAX_CLASS: Final = 60
#: Where an error's class ends: a colon followed by white space or the end of the text.
_CLASS_END: Final = re.compile(r":(?:\s|$)")


def error_class(error: str | None) -> str | None:
    """The class of an error text: up to its first colon that ends a word (``": "``, or one
    ending the text: the colon of a URL or a time is kept), e-mail addresses masked, at most 60
    characters (``recipient <address> refused``, ``SMTP failure at connect``,
    ``connecting to NATS at nats://10.0.0.5:4222 failed``)."""
    if not error:
        return None
    head = _ADDRESS.sub("<address>", _CLASS_END.split(error, maxsplit=1)[0]).strip()
    return head[:_MAX_CLASS] or None


def error_classes(groups: Sequence[ErrorGroup]) -> list[ErrorGroup]:
    """Exact-error groups folded into error classes (:func:`error_class`), largest first: what
    ``outbox failed`` and the dead-letter page show."""
    folded: dict[str | None, ErrorGroup] = {}
    for group in groups:
        name = error_class(group.error)
        seen = folded.get(name)
        if seen is None:
            folded[name] = attrs.evolve(group, error=name)
            continue
        firsts = [t for t in (seen.first_failed_at, group.first_failed_at) if t is not None]
        lasts = [t for t in (seen.last_failed_at, group.last_failed_at) if t is not None]
        folded[name] = ErrorGroup(
            error=name,
            rows=seen.rows + group.rows,
            first_failed_at=min(firsts, default=None),
            last_failed_at=max(lasts, default=None),
        )
    return sorted(folded.values(), key=lambda g: (-g.rows, g.error is None, g.error or ""))


def sparkline(values: Sequence[float]) -> str:
    """One block character per value, scaled from 0 to the series' largest value."""
    if not values:
        return ""
    top = max(values)
    if top <= 0:
        return SPARKS[0] * len(values)
    last = len(SPARKS) - 1
    return "".join(SPARKS[min(last, max(0, round(v / top * last)))] for v in values)


@attrs.frozen
class LaneRow:
    """One lane of one queue table, now."""

    queue: str
    lane: str
    pending: int = 0
    #: Seconds since the oldest pending row was written (None: nothing pending).
    oldest_pending_s: float | None = None
    #: Pending rows under a live claim (being worked).
    in_flight: int = 0
    #: Pending rows whose claim's lease ended unmarked (a worker died or stalled): due again.
    leases_expired: int = 0
    failed: int = 0
    #: Rows sent in the last minute.
    sent_per_min: int = 0
    #: Enqueue → sent seconds, of the rows sent in the last 5 minutes.
    p50_s: float | None = None
    p95_s: float | None = None
    #: The most recent error class among pending and failed rows, and how many rows carry it.
    last_error_class: str | None = None
    last_error_count: int = 0
    #: The lane's live leader (None: no live term).
    leader: str | None = None
    term: int | None = None
    #: Workers of the lane whose heartbeat is within the bound they stated (any host).
    workers: int = 0

    def as_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen
class ChannelRow:
    """One consumer channel (a consumer group on a subject), now: its backlog is in the broker."""

    group: str
    subject: str
    #: Events not yet handed to the group (None: the broker does not know the group there).
    waiting: int | None
    #: Handed out and not acknowledged (None: the broker has no such count, Kafka).
    unacknowledged: int | None
    #: Events the channel parked on the dead-letter destination (its ledger, all time).
    parked: int = 0

    def as_json(self) -> dict[str, Any]:
        return attrs.asdict(self)
