"""psycopg's outage errors, mapped once to the core's :class:`~outbox_core.errors.StoreUnavailable`.

An *outage* is anything that says the database could not be reached or the connection was lost:
psycopg's ``OperationalError`` (connection refused or dropped, the server shutting down, a
statement cancelled, a serialization failure: worth a retry), ``InterfaceError`` (a closed
connection) and the pool's ``PoolTimeout`` (no connection in time). Everything else (a missing
table, a statement the row breaks, a bug) is not an outage and propagates as it is.

Every method of :class:`~outbox_adapters.postgres.store.PostgresStore` goes through
:func:`mapped_outages`; the leader lease and the wake-up listener use :func:`as_unavailable`
where they catch connection problems. The message names the operation, the error class and its
SQLSTATE (or, for a client-side connection failure, libpq's first line, which names the host, never
a row); the driver's error is chained as ``__cause__`` for the full story. No row data, no
parameters.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any, Final, ParamSpec, TypeVar

import psycopg
import psycopg_pool

from outbox_core.errors import StoreUnavailable

__all__ = ["OUTAGES", "PostgresUnavailable", "as_unavailable", "is_outage", "mapped_outages"]

#: The psycopg errors that mean "the store is unavailable".
OUTAGES: Final = (psycopg.OperationalError, psycopg.InterfaceError, psycopg_pool.PoolTimeout)

P = ParamSpec("P")
R = TypeVar("R")


class PostgresUnavailable(StoreUnavailable):
    """:class:`StoreUnavailable` as the PostgreSQL adapters raise it. Catch :class:`StoreUnavailable`."""


def is_outage(exc: BaseException) -> bool:
    """Whether ``exc`` is one of :data:`OUTAGES` (or already a :class:`StoreUnavailable`)."""
    return isinstance(exc, (*OUTAGES, StoreUnavailable))


def as_unavailable(exc: BaseException, doing: str) -> StoreUnavailable:
    """The :class:`StoreUnavailable` to raise (``from exc``) for an outage met while ``doing``."""
    if isinstance(exc, StoreUnavailable):
        return exc
    sqlstate = getattr(exc, "sqlstate", None)
    if sqlstate:
        # A server error: its text may quote a value (a DETAIL line); the SQLSTATE says enough.
        why = f"{type(exc).__name__} (SQLSTATE {sqlstate})"
    else:
        # A client-side failure (connect, a dropped socket, a pool timeout): libpq's or the pool's
        # first line names the host or the wait, never a row.
        text = str(exc).strip()
        why = f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__
    return PostgresUnavailable(f"PostgreSQL store unavailable during {doing}: {why}")


def mapped_outages(
    method: Callable[P, Coroutine[Any, Any, R]],
) -> Callable[P, Coroutine[Any, Any, R]]:
    """Decorate a store coroutine so an outage leaves it as :class:`StoreUnavailable`."""
    doing = method.__name__

    @functools.wraps(method)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await method(*args, **kwargs)
        except OUTAGES as exc:
            raise as_unavailable(exc, doing) from exc

    return wrapper
