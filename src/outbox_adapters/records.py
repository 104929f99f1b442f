"""What every outbox store shares: the rows it shows, its counters, and its rules for what goes in.

:class:`~outbox_adapters.postgres.store.PostgresStore` and
:class:`~outbox_adapters.memory.MemoryStore` answer the same questions with the same types, refuse
the same payloads and read row ids the same way, because both take them from here; the contract
suite (``tests/contract``) checks that they still agree. This module imports attrs, the standard
library and the core, nothing else, so that neither store's technology leaks into the other.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Final

import attrs

from outbox_core.delivery import Status
from outbox_core.messages import JSONObject, Mark, RowId
from outbox_core.payload import DEFAULT_MAX_BYTES, validate_payload
from outbox_core.ports import MarkResult

__all__ = [
    "MAX_PAYLOAD_BYTES",
    "NO_SUCH_ROW",
    "AuditEntry",
    "ErrorGroup",
    "FailedReport",
    "StoreStats",
    "StoredRow",
    "check_distinct_rows",
    "coerce_row_id",
    "count_mark",
    "count_marked",
    "log_requeued",
    "payload_json",
    "usable_row_ids",
]

#: The largest payload accepted, as UTF-8 JSON: the core's limit. A row is a message, not a blob
#: store.
MAX_PAYLOAD_BYTES: Final = DEFAULT_MAX_BYTES
#: The reason given for a requeue of an id no row has.
NO_SUCH_ROW: Final = "no such row"


# --- what a store shows ---------------------------------------------------------------------------


@attrs.define
class StoreStats:
    """Counters since the store was built (for logs, metrics and tests)."""

    #: Rows handed out by ``claim_due``.
    claimed_rows: int = 0
    #: Marks (and releases) the fence accepted.
    applied_marks: int = 0
    #: Marks (and releases) the fence refused: dropped, never applied.
    stale_marks: int = 0


@attrs.frozen
class StoredRow:
    """A row as an operator sees it. ``payload`` is raw: redact it before showing it anywhere."""

    id: int
    lane: str
    status: Status
    #: The decoded payload, or the stored JSON text when it cannot be decoded (a poison row).
    payload: JSONObject | str
    attempts: int
    next_attempt_at: datetime
    claim_token: str | None
    claimed_at: datetime | None
    last_error: str | None
    idempotency_key: str | None
    created_at: datetime
    updated_at: datetime
    resolved_at: datetime | None
    scrubbed_at: datetime | None


@attrs.frozen
class ErrorGroup:
    """Failed rows that share an error."""

    error: str | None
    rows: int
    first_failed_at: datetime | None
    last_failed_at: datetime | None


@attrs.frozen
class FailedReport:
    """The newest failed rows, and every failed row grouped by error."""

    rows: tuple[StoredRow, ...]
    by_error: tuple[ErrorGroup, ...]


@attrs.frozen
class AuditEntry:
    """Who put which failed row back to pending, and what it had failed with (PostgreSQL:
    a row of ``outbox_requeue_audit``)."""

    message_id: int
    actor: str
    requeued_at: datetime
    previous_attempts: int
    previous_error: str | None


# --- what goes in ---------------------------------------------------------------------------------


def payload_json(payload: object) -> str:
    """The payload as compact JSON text for the database, or :class:`InvalidPayload` naming the
    problem.

    The rule is the core's (:func:`outbox_core.payload.validate_payload`): JSON types only (a tuple
    is refused, not turned into a list), string keys, no NaN, no U+0000 or lone surrogate, at most
    64 levels deep, at most :data:`MAX_PAYLOAD_BYTES` of UTF-8.
    """
    if isinstance(payload, Mapping) and not isinstance(payload, dict):
        # NewMessage takes any mapping at the top (a MappingProxyType, say); the core checks dicts.
        payload = dict(payload)
    checked = validate_payload(payload, max_bytes=MAX_PAYLOAD_BYTES)
    # The same encoding the core measured, so the size it allowed is the size that is written.
    return json.dumps(checked, allow_nan=False, ensure_ascii=False, separators=(",", ":"))


def coerce_row_id(value: RowId) -> int:
    """Ids are integers (PostgreSQL bigints); a string of digits is accepted (typed on a CLI)."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise TypeError(f"a row id is an int, got {type(value).__name__} {value!r}")
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"a row id is an integer, got {value!r}") from None


def usable_row_ids(row_ids: Sequence[RowId], refused: dict[RowId, str]) -> dict[int, RowId]:
    """Map each usable id to the value the caller gave; an unusable one goes into ``refused`` as
    no such row (a requeue by id answers for every id it was given)."""
    wanted: dict[int, RowId] = {}
    for given in row_ids:
        try:
            wanted[coerce_row_id(given)] = given
        except (TypeError, ValueError):
            refused[given] = NO_SUCH_ROW
    return wanted


# --- what a store reports -------------------------------------------------------------------------


def count_mark(
    stats: StoreStats, log: logging.Logger, *, applied: bool, row_id: RowId, what: str
) -> MarkResult:
    """Count a fenced write in ``stats``, log it if the fence refused it, and say which it was."""
    if applied:
        stats.applied_marks += 1
        return MarkResult.APPLIED
    stats.stale_marks += 1
    # The row id only: a payload may hold secrets, and a stale mark is no reason to show one.
    log.warning(
        "stale %s dropped: row %s is no longer pending under this claim "
        "(its lease expired and a sibling re-claimed it, or it was already resolved)",
        what,
        row_id,
        extra={"outbox_row_id": row_id, "outbox_stale": what},
    )
    return MarkResult.STALE


def count_marked(
    stats: StoreStats, log: logging.Logger, *, applied: bool, mark: Mark
) -> MarkResult:
    """:func:`count_mark` for a mark; its words for the log are written only if it was stale."""
    if applied:
        stats.applied_marks += 1
        return MarkResult.APPLIED
    return count_mark(stats, log, applied=False, row_id=mark.row_id, what=f"mark {mark.status}")


def check_distinct_rows(marks: Sequence[Mark]) -> list[int]:
    """The row ids of ``marks`` (``mark_many``), refusing two marks of one row: which would win
    is undefined."""
    ids = [coerce_row_id(m.row_id) for m in marks]
    if len(set(ids)) != len(ids):
        raise ValueError("mark_many: two marks for the same row")
    return ids


def log_requeued(log: logging.Logger, requeued: Sequence[RowId], actor: str) -> None:
    """Say who put which failed rows back to pending (nothing, when there were none)."""
    if requeued:
        log.info(
            "requeued %d failed row(s) for %s",
            len(requeued),
            actor,
            extra={"outbox_row_ids": list(requeued), "outbox_actor": actor},
        )
