"""How the store runs one statement: on a kept connection or a pooled one, as its own transaction.

A worker's claim and marks run one after another, so in the strict mode they all reuse one
connection (no pool round trip per mark); it is kept at most :data:`KEEP_FOR` seconds, then handed
back so the pool's checks (broken, past its lifetime) apply to it again. The kept connection keeps
its cursor too: psycopg's ``connection.execute`` makes a new cursor for every statement, which
costs about a quarter of the Python time of a mark (docs/benchmarks.md, "Dispatch, 2026-12-02").
A client-side cursor holds nothing on the server, so one handed back with its connection is simply
dropped.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, TypeVar

from psycopg import AsyncConnection, AsyncCursor
from psycopg.pq import TransactionStatus
from psycopg_pool import AsyncConnectionPool

__all__ = ["KEEP_FOR", "StatementRunner", "all_rows", "rows_returned"]

R = TypeVar("R")

#: Longest a store keeps one pooled connection between statements before handing it back.
KEEP_FOR: Final = 30.0
_IDLE: Final = TransactionStatus.IDLE


class StatementRunner:
    """Runs single statements for one store on its pool, keeping one idle connection warm."""

    def __init__(self, pool: AsyncConnectionPool[Any]) -> None:
        self._pool = pool
        #: The kept connection's cursor, reused by every statement run on it.
        self._cursor: AsyncCursor[Any] | None = None
        self._kept_conn: AsyncConnection[Any] | None = None
        self._kept_until = 0.0
        self._closing = False

    async def close(self) -> None:
        """Give the kept connection back to the pool; keep none from now on."""
        self._closing = True
        kept, self._cursor = self._cursor, None
        if kept is not None:
            await self._pool.putconn(kept.connection)

    async def run(
        self,
        query: str,
        params: Mapping[str, Any],
        read: Callable[[AsyncCursor[Any]], Awaitable[R]],
    ) -> R:
        """Run ``query`` as its own transaction (one round trip on an autocommit connection) on
        the kept connection or a pooled one, and ``read`` its cursor. (A parameter's format is its
        placeholder's: the statements' arrays of values are ``%(name)b``, dumped in binary.)"""
        cur = await self._take()
        ok = False
        try:
            if cur.connection.autocommit:
                result = await read(await cur.execute(query, params))
            else:
                async with cur.connection.transaction():
                    result = await read(await cur.execute(query, params))
            ok = True
        finally:
            await self._give_back(cur, ok=ok)
        return result

    async def _take(self) -> AsyncCursor[Any]:
        """A cursor on the kept connection if it is free, else on one from the pool."""
        kept = self._cursor
        if kept is not None:
            self._cursor = None
            return kept
        conn: AsyncConnection[Any] = await self._pool.getconn()
        return conn.cursor()

    async def _give_back(self, cur: AsyncCursor[Any], *, ok: bool) -> None:
        """Keep ``cur`` and its connection for the next statement, or return the connection.

        Only a connection whose statement succeeded and that is idle (no transaction left open)
        is kept, one at a time, and for at most :data:`KEEP_FOR` seconds. Anything else goes
        straight back, and the pool discards it if it is broken.
        """
        conn = cur.connection
        now = time.monotonic()
        if self._cursor is None and ok and not self._closing:
            if conn is not self._kept_conn:
                self._kept_conn, self._kept_until = conn, now + KEEP_FOR
            if now < self._kept_until and conn.pgconn.transaction_status == _IDLE:
                self._cursor = cur
                return
            self._kept_conn = None
        await self._pool.putconn(conn)


async def rows_returned(cur: AsyncCursor[Any]) -> int:
    """How many rows the statement returned (or matched, for a plain UPDATE)."""
    return cur.rowcount


async def all_rows(cur: AsyncCursor[Any]) -> list[Any]:
    return await cur.fetchall()
