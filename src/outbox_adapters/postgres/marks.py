"""The parameters of the mark statements (``MARK``, ``MARK_SENT``, ``MARK_MANY``,
``MARK_SENT_MANY``, ``DISABLE_ENDPOINTS``), built from the core's :class:`~outbox_core.messages.Mark` values, which of
the two single-row marks a mark takes, and the one refusal a mark can meet before anything is
written (an endpoint to disable on a table that has none).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Table

from outbox_adapters.store_rules import coerce_row_id
from outbox_core.delivery import SCRUBBED_ON_MARK
from outbox_core.errors import ConfigurationError
from outbox_core.messages import Mark

__all__ = [
    "check_disable",
    "disable_params",
    "mark_many_params",
    "mark_params",
    "scrub_groups",
    "sent_many_params",
    "sent_params",
    "text_array",
]


def mark_params(mark: Mark) -> dict[str, Any]:
    """``MARK``'s parameters for ``mark``."""
    return {
        "id": coerce_row_id(mark.row_id),
        "token": mark.token.value,
        "status": mark.status.value,
        "reason": mark.reason,
        "retry_delay": mark.retry_delay,
        "scrub_keys": text_array(mark.scrub_keys),
        "patch": _patch_json(mark),
        "refund": mark.refund,
        "now": None,
    }


def sent_params(mark: Mark) -> dict[str, Any] | None:
    """``MARK_SENT``'s parameters when ``mark`` is the common kind (dispatched or skipped, no
    payload patch), else ``None``: the mark takes ``MARK``. Neither status can disable an endpoint
    or carry a retry delay (the core's ``Mark`` refuses both)."""
    if mark.status not in SCRUBBED_ON_MARK or mark.payload_patch:
        return None
    return {
        "id": coerce_row_id(mark.row_id),
        "token": mark.token.value,
        "status": mark.status.value,
        "reason": mark.reason,
        "scrub_keys": text_array(mark.scrub_keys),
    }


def sent_many_params(group: Sequence[Mark]) -> dict[str, Any] | None:
    """``MARK_SENT_MANY``'s parameters when every mark of ``group`` is the common kind (as
    :func:`sent_params`) and all scrub the same keys, else ``None``: the group takes
    ``MARK_MANY``."""
    if not group:
        return None
    keys = group[0].scrub_keys
    for mark in group:
        if mark.status not in SCRUBBED_ON_MARK or mark.payload_patch or mark.scrub_keys != keys:
            return None
    return {
        "ids": [coerce_row_id(m.row_id) for m in group],
        "tokens": [m.token.value for m in group],
        "statuses": [m.status.value for m in group],
        "reasons": [m.reason for m in group],
        "scrub_keys": text_array(keys),
    }


def mark_many_params(group: Sequence[Mark]) -> dict[str, Any]:
    """``MARK_MANY``'s parameters for one group of :func:`scrub_groups`."""
    return {
        "ids": [coerce_row_id(m.row_id) for m in group],
        "tokens": [m.token.value for m in group],
        "statuses": [m.status.value for m in group],
        "reasons": [m.reason for m in group],
        "retry_delays": [m.retry_delay for m in group],
        "scrubs": [bool(m.scrub_keys) for m in group],
        "patches": [_patch_json(m) for m in group],
        "refunds": [m.refund for m in group],
        "scrub_keys": text_array(next((m.scrub_keys for m in group if m.scrub_keys), frozenset())),
        "now": None,
    }


def disable_params(marks: Sequence[Mark]) -> dict[str, Any] | None:
    """``DISABLE_ENDPOINTS``'s parameters for the marks (all applied) that ask for it, or
    ``None`` when none does."""
    wanted = [m for m in marks if m.disable_endpoint]
    if not wanted:
        return None
    return {
        "ids": [coerce_row_id(m.row_id) for m in wanted],
        "reasons": [m.reason for m in wanted],
    }


def check_disable(table: Table, marks: Sequence[Mark]) -> None:
    """Refuse marks that ask to disable an endpoint when ``table`` has no ``endpoint_id``."""
    if "endpoint_id" not in table.c and any(m.disable_endpoint for m in marks):
        raise ConfigurationError(
            f"a mark asks to disable its webhook endpoint (HTTP 410), but queue table"
            f" {table.name} has no endpoint_id column; only the webhook deliveries table"
            " (outbox_webhook_delivery) takes such a mark"
        )


@functools.lru_cache(maxsize=64)
def text_array(keys: frozenset[str]) -> str:
    """``keys`` as a PostgreSQL ``text[]`` literal (every element quoted and escaped), sorted.

    A lane's scrub keys are the same for every mark, so their literal is made once; sent as text
    and cast by the statement (``::text[]``), it spares the driver's list adaptation per mark,
    which would otherwise be the largest single cost of building a mark's parameters.
    """
    quoted = ('"' + key.replace("\\", "\\\\").replace('"', '\\"') + '"' for key in sorted(keys))
    return "{" + ",".join(quoted) + "}"


def _patch_json(mark: Mark) -> str:
    """The mark's payload patch as JSON text (``{}``: nothing to write)."""
    patch = mark.payload_patch
    return "{}" if not patch else json.dumps(dict(patch), ensure_ascii=False, separators=(",", ":"))


def scrub_groups(marks: Sequence[Mark]) -> list[list[Mark]]:
    """Marks grouped so that each group scrubs one set of keys (marks that scrub nothing join the
    first group)."""
    groups: dict[frozenset[str], list[Mark]] = {}
    for mark in marks:
        if mark.scrub_keys:
            groups.setdefault(mark.scrub_keys, []).append(mark)
    plain = [m for m in marks if not m.scrub_keys]
    if not groups:
        return [plain] if plain else []
    first = next(iter(groups))
    groups[first].extend(plain)
    return list(groups.values())
