"""Offline DDL for the outbox tables: print it, apply it, verify it (``outbox schema sql|apply|verify``).

The DDL is compiled from :data:`.tables.metadata` for the PostgreSQL dialect, so it matches what
Alembic autogenerate would write for a host that merges the metadata into its own migrations. Every
statement is ``IF NOT EXISTS``: applying twice is harmless. It creates what is missing and never
alters what exists; :func:`verify` reports what differs.
"""

from __future__ import annotations

from typing import Final

import psycopg
from sqlalchemy import CheckConstraint, Table
from sqlalchemy.dialects import postgresql
from sqlalchemy.schema import CreateIndex, CreateTable

from outbox_adapters.postgres.tables import metadata

__all__ = ["apply", "ddl_sql", "ddl_statements", "verify"]

#: Columns of the outbox tables in any schema on the search path.
_COLUMNS: Final = """
SELECT table_name, column_name
FROM information_schema.columns
WHERE table_schema = ANY(current_schemas(false)) AND table_name = ANY(%(tables)s)
"""

#: Indexes of the outbox tables in any schema on the search path.
_INDEXES: Final = """
SELECT tablename, indexname
FROM pg_indexes
WHERE schemaname = ANY(current_schemas(false)) AND tablename = ANY(%(tables)s)
"""

#: Named CHECK constraints of the outbox tables.
_CHECKS: Final = """
SELECT rel.relname, con.conname
FROM pg_constraint con
JOIN pg_class rel ON rel.oid = con.conrelid
JOIN pg_namespace ns ON ns.oid = rel.relnamespace
WHERE con.contype = 'c' AND ns.nspname = ANY(current_schemas(false))
  AND rel.relname = ANY(%(tables)s)
"""


def ddl_statements() -> list[str]:
    """Each CREATE TABLE / CREATE INDEX statement, in dependency order, without a semicolon."""
    dialect = postgresql.dialect()  # type: ignore[no-untyped-call]
    out: list[str] = []
    for table in metadata.sorted_tables:
        out.append(str(CreateTable(table, if_not_exists=True).compile(dialect=dialect)).strip())
        for index in sorted(table.indexes, key=lambda ix: str(ix.name)):
            create = CreateIndex(index, if_not_exists=True)
            out.append(str(create.compile(dialect=dialect)).strip())
    return out


def ddl_sql() -> str:
    """The whole DDL as one SQL script (``outbox schema sql``)."""
    return "".join(f"{statement};\n\n" for statement in ddl_statements())


def apply(dsn: str) -> None:
    """Create whatever is missing, in one transaction (``outbox schema apply``)."""
    with psycopg.connect(dsn) as conn, conn.transaction():
        for statement in ddl_statements():
            conn.execute(statement)


def _expected(table: Table) -> tuple[set[str], set[str], set[str]]:
    columns = {column.name for column in table.columns}
    indexes = {str(index.name) for index in table.indexes}
    checks = {
        str(constraint.name)
        for constraint in table.constraints
        if isinstance(constraint, CheckConstraint)
    }
    return columns, indexes, checks


def verify(dsn: str) -> list[str]:
    """Problems found (missing tables, columns, indexes, checks); an empty list means all is there."""
    tables = [table.name for table in metadata.sorted_tables]
    with psycopg.connect(dsn, autocommit=True) as conn:
        found_columns = set(conn.execute(_COLUMNS, {"tables": tables}).fetchall())
        found_indexes = set(conn.execute(_INDEXES, {"tables": tables}).fetchall())
        found_checks = set(conn.execute(_CHECKS, {"tables": tables}).fetchall())
    present = {table for table, _ in found_columns}
    problems: list[str] = []
    for table in metadata.sorted_tables:
        if table.name not in present:
            problems.append(f"table {table.name} is missing")
            continue
        columns, indexes, checks = _expected(table)
        problems.extend(
            f"column {table.name}.{name} is missing"
            for name in sorted(columns)
            if (table.name, name) not in found_columns
        )
        problems.extend(
            f"index {name} on {table.name} is missing"
            for name in sorted(indexes)
            if (table.name, name) not in found_indexes
        )
        problems.extend(
            f"check constraint {name} on {table.name} is missing"
            for name in sorted(checks)
            if (table.name, name) not in found_checks
        )
    return problems
