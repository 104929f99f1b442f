"""The PostgreSQL server every comparison of one run uses, and a fresh database per comparison.

The server is found in :func:`~outbox_adapters.postgres.embedded.find_postgres` order, with the
bench's own variable: ``--dsn`` → ``OUTBOX_BENCH_DSN`` → a container if Docker answers → an embedded
pgserver (so a fresh clone runs with nothing installed). Each comparison gets a database of its own
(``outbox_bench_<name>_<hex>``), with the outbox schema applied, dropped when it ends: one
comparison's dead tuples, statistics and WAL can't bleed into the next.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from outbox_adapters.postgres import schema
from outbox_adapters.postgres.embedded import ServerSource, find_postgres

__all__ = ["BENCH_DSN_ENV", "database_dsn", "fresh_database", "server", "server_facts"]

#: The environment variable naming the server to benchmark against.
BENCH_DSN_ENV = "OUTBOX_BENCH_DSN"

#: Seconds a connection attempt may take (the harness never hangs).
CONNECT_TIMEOUT = 10

#: Settings worth recording next to the figures: they change what the figures mean.
_SETTINGS = (
    "server_version",
    "synchronous_commit",
    "fsync",
    "shared_buffers",
    "max_connections",
    "autovacuum",
    "wal_level",
    "checkpoint_timeout",
    "max_wal_size",
)


@contextlib.contextmanager
def server(dsn: str | None) -> Iterator[ServerSource]:
    """The server of this run; a container or embedded server is stopped when the block ends."""
    with find_postgres(dsn, env=BENCH_DSN_ENV) as found:
        yield found


def database_dsn(server_dsn: str, name: str) -> str:
    """``server_dsn`` pointed at database ``name`` (everything else kept)."""
    params = conninfo_to_dict(server_dsn)
    params["dbname"] = name
    params.setdefault("connect_timeout", CONNECT_TIMEOUT)
    return make_conninfo("", **params)


def _admin(server_dsn: str) -> psycopg.Connection[Any]:
    return psycopg.connect(server_dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT)


@contextlib.contextmanager
def fresh_database(server_dsn: str, label: str, *, outbox_schema: bool = True) -> Iterator[str]:
    """Create a database for one comparison (with the outbox tables), yield its DSN, drop it."""
    name = f"outbox_bench_{label}_{secrets.token_hex(3)}"
    with _admin(server_dsn) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    dsn = database_dsn(server_dsn, name)
    try:
        if outbox_schema:
            schema.apply(dsn)
        yield dsn
    finally:
        with _admin(server_dsn) as admin, contextlib.suppress(psycopg.Error):
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def server_facts(server_dsn: str) -> dict[str, Any]:
    """Version and the settings that shape the figures (durability, memory, autovacuum)."""
    facts: dict[str, Any] = {}
    with _admin(server_dsn) as conn:
        for name in _SETTINGS:
            try:
                row = conn.execute(f"SHOW {name}").fetchone()
            except psycopg.Error:
                continue
            facts[name] = None if row is None else row[0]
        version = conn.execute("SELECT version()").fetchone()
        facts["version"] = None if version is None else version[0]
        params = conninfo_to_dict(server_dsn)
        facts["transport"] = (
            "unix socket"
            if str(params.get("host", "")).startswith("/") or not params.get("host")
            else f"tcp {params.get('host')}:{params.get('port', 5432)}"
        )
    return facts
