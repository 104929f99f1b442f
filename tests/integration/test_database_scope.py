"""The database's scope (postgres.identity): what makes the e-mail Message-IDs of two databases
differ for rows of the same id (lanes.email.row_message_id)."""

from __future__ import annotations

import re

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from outbox_adapters.postgres.identity import database_scope
from outbox_adapters.postgres.pools import connection_pool

pytestmark = pytest.mark.integration


async def scope_of(dsn: str) -> str:
    async with connection_pool(dsn, max_size=1) as pool:
        return await database_scope(pool)


async def test_the_scope_is_the_cluster_s_identifier_and_the_database_s_oid(dsn: str) -> None:
    scope = await scope_of(dsn)
    assert re.fullmatch(r"\d+/\d+", scope), scope
    assert await scope_of(dsn) == scope  # every worker of this database computes the same one
    # Another database of the same cluster (a dump restored beside it): another scope.
    other = make_conninfo(**{**conninfo_to_dict(dsn), "dbname": "postgres"})
    theirs = await scope_of(other)
    assert theirs.split("/")[0] == scope.split("/")[0]
    assert theirs != scope
