"""The rules every outbox store applies the same way: what goes in, how row ids are read, how
fenced writes are counted.

:class:`~outbox_adapters.postgres.store.PostgresStore` and
:class:`~outbox_adapters.memory.MemoryStore` refuse the same payloads, read row ids the same way
and count their marks alike, because both take those rules from here; the value types they answer
with are the core's (:mod:`outbox_core.operator`). The contract suite (``tests/contract``) checks
that they still agree. This module imports the standard library and the core, nothing else, so
that neither store's technology leaks into the other.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Final

import attrs

from outbox_core.delivery import Status
from outbox_core.errors import ConfigurationError
from outbox_core.messages import Mark, RowId
from outbox_core.operator import StoreStats
from outbox_core.payload import DEFAULT_MAX_BYTES, validate_payload
from outbox_core.ports import MarkResult

__all__ = [
    "MAX_PAYLOAD_BYTES",
    "NO_SUCH_ROW",
    "RecipientRow",
    "check_batch_size",
    "check_distinct_rows",
    "coerce_row_id",
    "count_mark",
    "log_requeued",
    "payload_json",
    "usable_row_ids",
]

#: The largest payload accepted, as UTF-8 JSON: the core's limit. A row is a message, not a blob
#: store.
MAX_PAYLOAD_BYTES: Final = DEFAULT_MAX_BYTES
#: The reason given for a requeue of an id no row has.
NO_SUCH_ROW: Final = "no such row"


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


def count_mark(stats: StoreStats, *, applied: bool) -> MarkResult:
    """Count a fenced write (a mark or a release) in ``stats`` and say which it was.

    A stale one is not logged here: the worker that made it logs it, once, with its context; the
    durable count per lane is the store's own (``OperatorStore.lane_stats``).
    """
    if applied:
        stats.applied_marks += 1
        return MarkResult.APPLIED
    stats.stale_marks += 1
    return MarkResult.STALE


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


def check_batch_size(batch_size: object) -> int:
    """``batch_size`` if it is a positive number of rows (``rewrite_payloads``), else
    :class:`~outbox_core.errors.ConfigurationError` naming it."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ConfigurationError(
            f"batch_size must be a positive number of rows, got {batch_size!r}"
        )
    return batch_size


@attrs.frozen
class RecipientRow:
    """One recipient's row as a consumer channel sees it (``RecipientRows.ensure`` answers with
    these, on PostgreSQL and in memory alike)."""

    key: str
    status: Status
    attempts: int
    last_error: str | None
    #: How long until the row is worth looking at again (0: due, or a send is in flight).
    wait: timedelta
