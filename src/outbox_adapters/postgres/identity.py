"""Which database this is: the scope of the e-mail lane's Message-IDs
(:func:`outbox_adapters.lanes.email.row_message_id`).

The PostgreSQL cluster's system identifier (chosen at ``initdb``, kept by its physical replicas, so
a failover keeps it) and the database's oid within the cluster: a staging cluster, or a dump
restored into another cluster or another database, has a different scope than production.
"""

from __future__ import annotations

from typing import Any, Final

from psycopg_pool import AsyncConnectionPool

from outbox_adapters.postgres.errors import mapped_outages

__all__ = ["DATABASE_SCOPE", "database_scope"]

#: ``<system identifier>/<database oid>``; ``pg_control_system()`` is executable by every role.
DATABASE_SCOPE: Final = """
SELECT (SELECT system_identifier FROM pg_control_system())::text || '/' || d.oid::text
FROM pg_database AS d WHERE d.datname = current_database()
"""


@mapped_outages
async def database_scope(pool: AsyncConnectionPool[Any]) -> str:
    """This database's scope, ``<system identifier>/<database oid>`` (one short query)."""
    async with pool.connection() as conn:
        cursor = await conn.execute(DATABASE_SCOPE)
        found = await cursor.fetchone()
    return "" if found is None else str(found[0])
