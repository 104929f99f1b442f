"""The one connection pool builder: what every worker, command and application run uses."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

__all__ = ["connection_pool", "open_pool"]


async def open_pool(  # noqa: PLR0913 - keyword-only, each with a default
    dsn: str,
    *,
    min_size: int = 1,
    max_size: int = 2,
    name: str = "outbox",
    connect_kwargs: Mapping[str, Any] | None = None,
    fail_fast: bool = True,
) -> AsyncConnectionPool[Any]:
    """An open pool of autocommit connections (the caller closes it): a mark is then one round
    trip, and multi-statement work runs in explicit transactions. With ``fail_fast``, a server
    that cannot be reached fails here, in seconds, with psycopg's own reason; without it, the
    pool keeps trying until its own timeout (a worker started while the database restarts)."""
    kwargs = {"autocommit": True, **(connect_kwargs or {})}
    if fail_fast:
        # One direct connection first: a pool would retry in the background until its timeout.
        conn = await psycopg.AsyncConnection.connect(dsn, connect_timeout=10, **kwargs)
        await conn.close()
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        dsn, min_size=min_size, max_size=max_size, kwargs=kwargs, open=False, name=name
    )
    await pool.open(wait=True)
    return pool


@contextlib.asynccontextmanager
async def connection_pool(
    dsn: str, *, max_size: int = 2, name: str = "outbox"
) -> AsyncIterator[AsyncConnectionPool[Any]]:
    """:func:`open_pool` for the block: the pool stores and leases share, closed when it ends."""
    pool = await open_pool(dsn, max_size=max_size, name=name)
    try:
        yield pool
    finally:
        await pool.close()
