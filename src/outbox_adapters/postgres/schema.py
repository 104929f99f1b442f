"""Offline DDL for the outbox tables: print it, apply it, verify it (``outbox schema sql|apply|verify``).

The DDL is compiled from :data:`.tables.metadata` for the PostgreSQL dialect, so it matches what
Alembic autogenerate would write for a host that merges the metadata into its own migrations. Every
statement is ``IF NOT EXISTS``: applying twice is harmless. It creates what is missing and never
alters what exists; :func:`verify` reports what differs. A table's triggers (:mod:`.triggers`: the
feed's push, ADR 0022) follow its DDL; their functions are ``CREATE OR REPLACE``, so applying a
newer release updates a function's body (Alembic users add them by hand: autogenerate sees no
trigger).
"""

from __future__ import annotations

from typing import Final

import psycopg
from sqlalchemy import CheckConstraint, Table
from sqlalchemy.dialects import postgresql
from sqlalchemy.schema import CreateIndex, CreateTable

from outbox_adapters.postgres.tables import ADDED_LATER, metadata
from outbox_adapters.postgres.triggers import triggers_of
from outbox_adapters.postgres.upgrades import DEFAULT_EXISTING_TENANT, TENANT_STEPS, tenant_sql
from outbox_adapters.webhook_scope import check_tenant

__all__ = ["apply", "ddl_sql", "ddl_statements", "trigger_statements", "verify"]

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

#: Enabled user triggers of the outbox tables.
_TRIGGERS: Final = """
SELECT rel.relname, trg.tgname
FROM pg_trigger trg
JOIN pg_class rel ON rel.oid = trg.tgrelid
JOIN pg_namespace ns ON ns.oid = rel.relnamespace
WHERE NOT trg.tgisinternal AND trg.tgenabled <> 'D'
  AND ns.nspname = ANY(current_schemas(false)) AND rel.relname = ANY(%(tables)s)
"""


def ddl_statements() -> list[str]:
    """Each CREATE TABLE / CREATE INDEX statement, then the table's triggers, in dependency order,
    without a semicolon."""
    dialect = postgresql.dialect()  # type: ignore[no-untyped-call]
    out: list[str] = []
    for table in metadata.sorted_tables:
        out.append(str(CreateTable(table, if_not_exists=True).compile(dialect=dialect)).strip())
        # Columns added after their table first shipped: a database made by an earlier release
        # gets them here (nullable, so adding one is instant and needs no backfill).
        out.extend(
            f"ALTER TABLE {table.name} ADD COLUMN IF NOT EXISTS {column.name}"
            f" {column.type.compile(dialect=dialect)}"
            for column in table.columns
            if column.info.get(ADDED_LATER) and column.nullable
        )
        for index in sorted(table.indexes, key=lambda ix: str(ix.name)):
            create = CreateIndex(index, if_not_exists=True)
            out.append(str(create.compile(dialect=dialect)).strip())
        out.extend(statement for trigger in triggers_of(table) for statement in trigger.ddl)
    return out


def trigger_statements() -> list[str]:
    """Every table's trigger statements, in order, without a semicolon: what an Alembic migration
    adds with ``op.execute`` (autogenerate sees tables and indexes, not triggers). Idempotent."""
    return [
        statement
        for table in metadata.sorted_tables
        for trigger in triggers_of(table)
        for statement in trigger.ddl
    ]


def ddl_sql(existing_tenant: str = DEFAULT_EXISTING_TENANT) -> str:
    """The whole DDL as one SQL script (``outbox schema sql``), then the upgrade of an earlier
    release's rows (:mod:`.upgrades`), which changes nothing on a new database."""
    upgrade = tenant_sql(existing_tenant)
    return "".join(f"{statement};\n\n" for statement in [*ddl_statements(), *upgrade])


def apply(dsn: str, *, existing_tenant: str = DEFAULT_EXISTING_TENANT) -> dict[str, int]:
    """Create whatever is missing, then upgrade an earlier release's rows, in one transaction
    (``outbox schema apply``). Returns how many rows each upgrade step changed (what it counts ->
    rows), the steps that changed nothing left out."""
    check_tenant(existing_tenant)
    changed: dict[str, int] = {}
    with psycopg.connect(dsn) as conn, conn.transaction():
        for statement in ddl_statements():
            conn.execute(statement)
        for what, statement in TENANT_STEPS:
            cursor = conn.execute(statement, {"tenant": existing_tenant} if what else None)
            if what and cursor.rowcount > 0:
                changed[what] = cursor.rowcount
    return changed


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
    """Problems found (missing tables, columns, indexes, checks, triggers); an empty list means all
    is there."""
    tables = [table.name for table in metadata.sorted_tables]
    with psycopg.connect(dsn, autocommit=True) as conn:
        found_columns = set(conn.execute(_COLUMNS, {"tables": tables}).fetchall())
        found_indexes = set(conn.execute(_INDEXES, {"tables": tables}).fetchall())
        found_checks = set(conn.execute(_CHECKS, {"tables": tables}).fetchall())
        found_triggers = set(conn.execute(_TRIGGERS, {"tables": tables}).fetchall())
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
        problems.extend(
            f"trigger {trigger.name} on {table.name} is missing or disabled"
            for trigger in triggers_of(table)
            if (table.name, trigger.name) not in found_triggers
        )
    return problems
