"""Running an operation's statements on the host's own handle, sync or async.

An operation that works in the host's transaction (the webhook host API,
:mod:`outbox_adapters.postgres.webhooks.tenants`) is written once, as a generator: it yields each
statement (SQL text with ``%(name)s`` parameters, and the parameters) and is sent back the rows it
returned, as dicts; its return value is the operation's result. :func:`run` drives it on a sync
handle and :func:`run_async` on an async one, so the logic exists once and has no I/O of its own.

Handles: ``psycopg.Connection`` / ``AsyncConnection``, and SQLAlchemy ``Connection`` / ``Session``
/ ``AsyncConnection`` / ``AsyncSession`` on the psycopg driver (``postgresql+psycopg://``): the
SQL goes to the driver unchanged (``exec_driver_sql``). With ``writes=True`` the handle must have
an open transaction (:func:`~outbox_adapters.postgres.enqueue.require_transaction`): the
operation's statements commit or roll back with the host's, never on their own.
"""

from __future__ import annotations

import sys
from collections.abc import Generator, Mapping
from typing import Any, TypeVar

import psycopg
from psycopg.rows import dict_row
from sqlalchemy import Connection
from sqlalchemy.orm import Session

from outbox_adapters.postgres.enqueue import require_transaction

__all__ = ["Operation", "Rows", "Step", "run", "run_async"]

T = TypeVar("T")
#: One statement: SQL text with ``%(name)s`` parameters, and the parameters.
Step = tuple[str, Mapping[str, Any]]
#: What a statement returned: its rows as dicts (none for a statement without rows).
Rows = list[dict[str, Any]]
#: An operation: yields statements, is sent their rows, returns its result.
Operation = Generator[Step, Rows, T]


def run(handle: object, operation: Operation[T], *, writes: bool) -> T:
    """Drive ``operation`` on a sync ``handle``; its result."""
    if _is_async(handle):
        raise TypeError(f"{type(handle).__name__} is asynchronous; use the async API")
    if writes:
        require_transaction(handle)
    try:
        step = next(operation)
        while True:
            step = operation.send(_execute(handle, step))
    except StopIteration as done:
        result: T = done.value
        return result


async def run_async(handle: object, operation: Operation[T], *, writes: bool) -> T:
    """Drive ``operation`` on an async ``handle``; its result."""
    if not _is_async(handle):
        raise TypeError(f"{type(handle).__name__} is synchronous; use the sync API")
    if writes:
        require_transaction(handle)
    try:
        step = next(operation)
        while True:
            step = operation.send(await _execute_async(handle, step))
    except StopIteration as done:
        result: T = done.value
        return result


def _async_types() -> tuple[type[Any], ...]:
    module = sys.modules.get("sqlalchemy.ext.asyncio")  # imported by whoever made such a handle
    return () if module is None else (module.AsyncConnection, module.AsyncSession)


def _is_async(handle: object) -> bool:
    return isinstance(handle, (psycopg.AsyncConnection, *_async_types()))


def _execute(handle: object, step: Step) -> Rows:
    sql, params = step
    if isinstance(handle, psycopg.Connection):
        with handle.cursor(row_factory=dict_row) as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall() if cursor.description is not None else []
    if isinstance(handle, Session):
        handle = handle.connection()
    if isinstance(handle, Connection):
        result = handle.exec_driver_sql(sql, dict(params))
        return [dict(row) for row in result.mappings()] if result.returns_rows else []
    raise TypeError(
        "the webhook host API needs a psycopg Connection/AsyncConnection or a SQLAlchemy"
        f" Connection, AsyncConnection, Session or AsyncSession; got {type(handle).__name__}"
    )


async def _execute_async(handle: object, step: Step) -> Rows:
    sql, params = step
    if isinstance(handle, psycopg.AsyncConnection):
        async with handle.cursor(row_factory=dict_row) as cursor:
            await cursor.execute(sql, params)
            return await cursor.fetchall() if cursor.description is not None else []
    connection: Any = handle
    session_type = _async_types()[1]
    if isinstance(handle, session_type):
        connection = await handle.connection()
    result = await connection.exec_driver_sql(sql, dict(params))
    return [dict(row) for row in result.mappings()] if result.returns_rows else []
