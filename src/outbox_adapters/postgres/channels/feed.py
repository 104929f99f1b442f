"""The in-app feed's reads and writes on ``outbox_notification`` (ADR 0022), always within one scope.

A :class:`Scope` is one audience's notifications: the platform operators' (``audience =
'platform'``, no tenant) or one tenant's (``audience = 'tenant' AND tenant_id = :tenant``). Every
statement here is rendered with the scope's predicate (:func:`scope_predicate`), so a query can
only ever see or change the rows of the scope it was given; the HTTP layer derives that scope from
the authenticated principal alone (:mod:`outbox_adapters.feed`).

Pages are keyset pages, newest first, on ``(created_at, id)`` (the feed index): a page's
:class:`Cursor` is the last row's position, and the next page is what lies strictly below it, so a
page never repeats or skips a row however many arrive meanwhile.

:func:`prune` is the retention job (``outbox feed prune``): it deletes READ rows created before a
cut-off, in batches, each batch a short transaction of its own.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Literal

import attrs
import psycopg
from psycopg_pool import AsyncConnectionPool

from outbox_adapters.postgres.errors import mapped_outages

__all__ = [
    "Cursor",
    "FeedStore",
    "Notification",
    "Page",
    "Scope",
    "prune",
    "scope_predicate",
]

#: The scope predicates. The tenant one is the feed's isolation: mutants in tests/mutations drop it.
PLATFORM_SCOPE: Final = "audience = 'platform' AND tenant_id IS NULL"
TENANT_SCOPE: Final = "audience = 'tenant' AND tenant_id = %(tenant_id)s"

PAGE: Final = """
SELECT id, event_id, title, body, created_at, read_at
FROM outbox_notification
WHERE {scope}{after}
ORDER BY created_at DESC, id DESC
LIMIT %(limit)s
"""
#: Below the cursor: the next page of a keyset walk, newest first.
AFTER_CURSOR: Final = "\n  AND (created_at, id) < (%(at)s, %(id)s)"

UNREAD: Final = """
SELECT count(*) FROM outbox_notification WHERE {scope} AND read_at IS NULL
"""

MARK_ONE: Final = """
UPDATE outbox_notification SET read_at = coalesce(read_at, now())
WHERE id = %(id)s AND {scope}
"""

MARK_ALL: Final = """
UPDATE outbox_notification SET read_at = now() WHERE {scope} AND read_at IS NULL
"""

#: One batch of the retention job: read rows created before the cut-off.
PRUNE_BATCH: Final = """
DELETE FROM outbox_notification
WHERE id IN (
    SELECT id FROM outbox_notification
    WHERE read_at IS NOT NULL AND created_at < %(cutoff)s
    ORDER BY created_at
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
)
"""

_BIGINT_MAX: Final = 2**63 - 1
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_CURSOR: Final = re.compile(r"(-?\d{1,19})\.(\d{1,19})")


@attrs.frozen
class Scope:
    """Whose notifications: the platform operators' or one tenant's users'."""

    audience: Literal["platform", "tenant"]
    tenant_id: str | None

    def __attrs_post_init__(self) -> None:
        if self.audience not in ("platform", "tenant"):
            raise ValueError(f"audience must be 'platform' or 'tenant', got {self.audience!r}")
        if self.audience == "platform" and self.tenant_id is not None:
            raise ValueError("the platform scope has no tenant")
        if self.audience == "tenant" and not self.tenant_id:
            raise ValueError("a tenant scope needs a non-empty tenant id")

    @classmethod
    def platform(cls) -> Scope:
        return cls("platform", None)

    @classmethod
    def tenant(cls, tenant_id: str) -> Scope:
        return cls("tenant", tenant_id)

    @property
    def key(self) -> str:
        """The scope as one string: the key its SSE subscribers are filed under."""
        return "platform" if self.tenant_id is None else f"tenant:{self.tenant_id}"

    @property
    def params(self) -> dict[str, Any]:
        return {} if self.tenant_id is None else {"tenant_id": self.tenant_id}


def scope_predicate(scope: Scope) -> str:
    """The WHERE clause of ``scope`` (read at call time, so a mutant reaches every statement)."""
    return PLATFORM_SCOPE if scope.audience == "platform" else TENANT_SCOPE


@attrs.frozen
class Cursor:
    """A position in a feed: the ``(created_at, id)`` of the last row of a page."""

    at: datetime
    id: int

    @property
    def text(self) -> str:
        """``<microseconds since 1970>.<id>``: exact (no float), and opaque enough for a URL."""
        return f"{(self.at - _EPOCH) // timedelta(microseconds=1)}.{self.id}"

    @classmethod
    def parse(cls, text: str) -> Cursor:
        """The cursor a page handed out; ``ValueError`` saying what is wrong with anything else."""
        found = _CURSOR.fullmatch(text)
        if found is None:
            raise ValueError(
                "cursor is not one this feed handed out (expected '<number>.<number>')"
            )
        micros, row_id = int(found[1]), int(found[2])
        if row_id > _BIGINT_MAX:
            raise ValueError("cursor names a row id out of range")
        try:
            at = _EPOCH + timedelta(microseconds=micros)
        except OverflowError:
            raise ValueError("cursor names a time out of range") from None
        return cls(at, row_id)


@attrs.frozen
class Notification:
    id: int
    event_id: str
    title: str
    body: str
    created_at: datetime
    read_at: datetime | None

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "event_id": self.event_id,
            "title": self.title,
            "body": self.body,
            "created_at": self.created_at.isoformat(),
            "read_at": None if self.read_at is None else self.read_at.isoformat(),
        }


@attrs.frozen
class Page:
    items: Sequence[Notification]
    #: Where the next page starts; ``None`` on the last page.
    next: Cursor | None


class FeedStore:
    """The feed's scoped queries on a pool of autocommit connections."""

    def __init__(self, pool: AsyncConnectionPool[Any]) -> None:
        self._pool = pool

    @mapped_outages
    async def page(self, scope: Scope, *, limit: int, after: Cursor | None = None) -> Page:
        """Up to ``limit`` notifications of ``scope`` below ``after`` (or the newest), newest first."""
        statement = PAGE.format(
            scope=scope_predicate(scope), after="" if after is None else AFTER_CURSOR
        )
        params = {**scope.params, "limit": limit + 1}
        if after is not None:
            params |= {"at": after.at, "id": after.id}
        async with self._pool.connection() as conn:
            cursor = await conn.execute(statement, params)
            rows = [Notification(*row) for row in await cursor.fetchall()]
        if len(rows) <= limit:
            return Page(rows, None)
        last = rows[limit - 1]
        return Page(rows[:limit], Cursor(last.created_at, last.id))

    @mapped_outages
    async def unread(self, scope: Scope) -> int:
        async with self._pool.connection() as conn:
            cursor = await conn.execute(UNREAD.format(scope=scope_predicate(scope)), scope.params)
            row = await cursor.fetchone()
        return int(row[0]) if row else 0

    @mapped_outages
    async def mark_read(self, scope: Scope, notification_id: int) -> bool:
        """Mark one notification of ``scope`` read; ``False`` when ``scope`` has no such row."""
        if not 0 < notification_id <= _BIGINT_MAX:
            return False
        async with self._pool.connection() as conn:
            cursor = await conn.execute(
                MARK_ONE.format(scope=scope_predicate(scope)),
                {**scope.params, "id": notification_id},
            )
            return bool(cursor.rowcount == 1)

    @mapped_outages
    async def mark_all_read(self, scope: Scope) -> int:
        """Mark every unread notification of ``scope`` read; how many were."""
        async with self._pool.connection() as conn:
            cursor = await conn.execute(MARK_ALL.format(scope=scope_predicate(scope)), scope.params)
            return int(cursor.rowcount)


def prune(dsn: str, older_than: timedelta, *, batch: int = 1000) -> int:
    """Delete the READ notifications created more than ``older_than`` ago, ``batch`` rows per
    transaction; how many were deleted. Unread rows are never touched, however old.

    The cut-off is taken once, from the database clock, so the job ends even while rows keep
    getting old under it.
    """
    if older_than <= timedelta(0):
        raise ValueError(f"older_than must be positive, got {older_than}")
    if batch < 1:
        raise ValueError(f"batch must be at least 1, got {batch}")
    deleted = 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        found = conn.execute("SELECT now() - %s::interval", (older_than,)).fetchone()
        cutoff = found[0] if found else None
        while True:
            removed = conn.execute(PRUNE_BATCH, {"cutoff": cutoff, "batch": batch}).rowcount
            deleted += removed
            if removed < batch:
                return deleted
