"""The one connection pool builder: what every worker, command and application run uses."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

__all__ = ["connection_pool"]


@contextlib.asynccontextmanager
async def connection_pool(
    dsn: str, *, max_size: int = 2, name: str = "outbox"
) -> AsyncIterator[AsyncConnectionPool[Any]]:
    """An open autocommit pool (as ``PostgresStore.open`` makes) that stores and leases share,
    closed when the block ends."""
    # One direct connection first: a wrong host fails in seconds with psycopg's own reason,
    # where a pool would retry in the background until its timeout.
    conn = await psycopg.AsyncConnection.connect(dsn, connect_timeout=10)
    await conn.close()
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        dsn,
        min_size=1,
        max_size=max_size,
        kwargs={"autocommit": True},
        open=False,
        name=name,
    )
    await pool.open(wait=True)
    try:
        yield pool
    finally:
        await pool.close()
