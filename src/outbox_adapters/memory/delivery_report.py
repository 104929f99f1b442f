"""The in-memory webhook repository's operator report (``deliveries``): the deliveries grouped by
status and error, largest group first, as PostgreSQL's ``DELIVERY_GROUPS`` and ``DELIVERY_COUNTS``
compute it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from outbox_adapters.memory.rows import Row, decoded
from outbox_adapters.webhook_model import DeliveryGroup, DeliveryReport, status_code
from outbox_core.delivery import Status

__all__ = ["delivery_report"]


def delivery_report(rows: Sequence[tuple[Row, int | None]], limit: int) -> DeliveryReport:
    """``rows`` (each delivery row and the endpoint it goes to) grouped by (status, error), at
    most ``limit`` groups, with the counts per status over all of them."""
    groups: dict[tuple[Status, str | None], list[tuple[Row, int | None]]] = {}
    for row, to in rows:
        groups.setdefault((row.status, row.last_error), []).append((row, to))
    ordered = sorted(
        groups.items(),
        key=lambda g: (-len(g[1]), g[0][0].value, g[0][1] is not None, g[0][1] or ""),
    )
    by_status: dict[Status, int] = {}
    for row, _ in rows:
        by_status[row.status] = by_status.get(row.status, 0) + 1
    return DeliveryReport(
        groups=tuple(_group(key, members) for key, members in ordered[:limit]),
        by_status=by_status,
    )


def _group(key: tuple[Status, str | None], members: list[tuple[Row, int | None]]) -> DeliveryGroup:
    newest = max((row for row, _ in members), key=lambda r: (r.updated_at, r.id))
    payload = decoded(newest.payload)
    last: dict[str, Any] = payload if isinstance(payload, dict) else {}
    response = last.get("response")
    return DeliveryGroup(
        status=key[0],
        error=key[1],
        deliveries=len(members),
        first_at=min(row.updated_at for row, _ in members),
        last_at=newest.updated_at,
        last_status=status_code(last.get("last_status")),
        response=None if response is None else str(response),
        endpoint_ids=tuple(sorted({to for _, to in members if to is not None})),
    )
