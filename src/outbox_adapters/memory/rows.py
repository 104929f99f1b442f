"""The in-memory store's row, and the pure rules it applies to rows (what PostgreSQL's statements
do: the scrub, the requeue filter, the failed-rows order)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import attrs

from outbox_core.delivery import Event, RowState, Status, step
from outbox_core.errors import InvalidPayload
from outbox_core.messages import ClaimToken
from outbox_core.operator import ErrorGroup, StoredRow
from outbox_core.payload import decode_payload
from outbox_core.ports import RequeueRequest

__all__ = [
    "NotJsonError",
    "Row",
    "decoded",
    "error_group",
    "failed_order",
    "matches",
    "not_json",
    "scrubbed",
]


@attrs.define
class Row:
    id: int
    lane: str
    #: The JSON text, as PostgreSQL stores it.
    payload: str
    next_attempt_at: datetime
    idempotency_key: str | None
    created_at: datetime
    updated_at: datetime
    status: Status = Status.PENDING
    attempts: int = 0
    claim_token: ClaimToken | None = None
    claimed_at: datetime | None = None
    last_error: str | None = None
    resolved_at: datetime | None = None
    scrubbed_at: datetime | None = None
    #: The enqueue's W3C trace context (PostgreSQL: the ``trace_context`` column).
    trace_context: str | None = None

    def take(self, event: Event) -> None:
        """Move the row through the core's state machine (``outbox_core.delivery.step``).

        The in-memory store changes status, attempts and the scrubbed flag only through here, so
        its rows follow the one table of moves the SQL store's guards implement; a move the table
        does not allow raises ``IllegalTransition`` (a requeue that may not happen,
        ``RequeueRefused``), the same refusals the contract suite expects of PostgreSQL.
        """
        after = step(RowState(self.status, self.attempts, self.scrubbed_at is not None), event)
        self.status, self.attempts = after.status, after.attempts

    def snapshot(self) -> StoredRow:
        return StoredRow(
            id=self.id,
            lane=self.lane,
            status=self.status,
            # As PostgresStore: the decoded object, or the stored text when it can't be decoded.
            payload=decoded(self.payload),
            attempts=self.attempts,
            next_attempt_at=self.next_attempt_at,
            claim_token=None if self.claim_token is None else self.claim_token.value,
            claimed_at=self.claimed_at,
            last_error=self.last_error,
            idempotency_key=self.idempotency_key,
            created_at=self.created_at,
            updated_at=self.updated_at,
            resolved_at=self.resolved_at,
            scrubbed_at=self.scrubbed_at,
        )


class NotJsonError(Exception):
    """NaN and Infinity: Python's json reads them, JSON (and PostgreSQL) has no such values."""


def not_json(name: str) -> object:
    raise NotJsonError(name)


def decoded(text: str) -> dict[str, Any] | str:
    """What PostgresStore.claim_due hands out: the decoded payload, or its text."""
    try:
        return decode_payload(text)
    except InvalidPayload:
        return text


def scrubbed(text: str, keys: frozenset[str]) -> str:
    """``payload - keys`` for an object (PostgreSQL's MARK); anything else is kept as it is."""
    if not keys:
        return text
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return text  # see the module docstring: PostgreSQL would still scrub this one
    if not isinstance(obj, dict):
        return text
    kept = {key: value for key, value in obj.items() if key not in keys}
    return json.dumps(kept, ensure_ascii=False, separators=(",", ":"))


def patched(text: str, patch: Mapping[str, Any] | None) -> str:
    """``payload || patch`` for an object (PostgreSQL's MARK); anything else is kept as it is."""
    if not patch:
        return text
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return text
    if not isinstance(obj, dict):
        return text
    return json.dumps({**obj, **patch}, ensure_ascii=False, separators=(",", ":"))


def matches(row: Row, request: RequeueRequest) -> bool:
    """The requeue filter: failed rows matching every filter given (``None`` = any); a row with
    no value for a filtered column does not match it, as SQL's NULL comparisons don't."""
    failed_at = row.resolved_at
    if row.status is not Status.FAILED:
        return False
    if request.lane is not None and row.lane != request.lane:
        return False
    if request.failed_since is not None and (failed_at is None or failed_at < request.failed_since):
        return False
    if request.failed_before is not None and (
        failed_at is None or failed_at >= request.failed_before
    ):
        return False
    return request.error_contains is None or (
        row.last_error is not None and request.error_contains in row.last_error
    )


def failed_order(row: StoredRow) -> tuple[bool, datetime, int]:
    return (row.resolved_at is None, row.resolved_at or row.created_at, row.id)


def error_group(error: str | None, rows: list[StoredRow]) -> ErrorGroup:
    times = [row.resolved_at for row in rows if row.resolved_at is not None]
    return ErrorGroup(
        error=error,
        rows=len(rows),
        first_failed_at=min(times, default=None),
        last_failed_at=max(times, default=None),
    )
