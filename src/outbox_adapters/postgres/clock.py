"""``DatabaseClock``: the PostgreSQL server's ``now()``, read from Python (docs/architecture.md,
"Who owns the clock").

The store does not need this. Its SQL already reads the database clock itself
(``coalesce(%(now)s, now())`` in :mod:`.statements`), so every replica stamps leases, due times and
marks from one clock and no replica's drift can cut a sibling's lease short. This class is for the
code *around* the store that must speak in the same time: the CLI (``outbox failed --since 1h``,
``outbox top``), reports, and a healthcheck comparing the two clocks.

It is a separate small class rather than a :class:`outbox_core.ports.Clock` because reading it is a
round trip: ``now()`` is ``async`` here, and there is no monotonic time or sleep to offer.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final

from psycopg.rows import tuple_row
from psycopg_pool import AsyncConnectionPool

__all__ = ["DatabaseClock"]

#: ``now()`` is the start of the current transaction; each read below is a transaction of its own,
#: so it is the server's time at the read, and the very clock the store's statements use.
_NOW: Final = "SELECT now()"


class DatabaseClock:
    """Reads the database's clock on a pooled connection. Nothing is done in the constructor."""

    def __init__(self, pool: AsyncConnectionPool[Any]) -> None:
        self._pool = pool

    async def now(self) -> datetime:
        """The server's current time (timezone-aware)."""
        async with self._pool.connection() as conn:
            # Tuples whatever row factory the pool's connections were configured with.
            cur = conn.cursor(row_factory=tuple_row)
            if conn.autocommit:
                await cur.execute(_NOW)
                row = await cur.fetchone()
            else:
                # Its own short transaction, so now() is not some earlier transaction's start.
                async with conn.transaction():
                    await cur.execute(_NOW)
                    row = await cur.fetchone()
        if row is None:  # pragma: no cover - SELECT now() always returns one row
            raise RuntimeError("SELECT now() returned no row")
        value: datetime = row[0]
        return value
